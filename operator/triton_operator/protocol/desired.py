"""A model at one revision: built once from its TritonModel by render/, carried unchanged to triton/'s
load call, a revision ConfigMap and the status. Plain data, so building it needs no gRPC client."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from google.protobuf import text_format

from .model_config import model_config_pb2


@dataclass(frozen=True)
class DesiredModel:
    """A model as it should run on every replica, each form of its config made once: the load request's
    JSON, the message serialized (about a hundred bytes, where a live message holds some 3 KiB: the
    operator keeps one value a model for as long as it runs) and config.pbtxt. No Kubernetes."""

    name: str
    revision: str
    config_json: str  # the load request's `config`
    files: Mapping[str, bytes] = field(default_factory=dict)
    composing: frozenset[str] = frozenset()  # the models an ensemble's steps run
    load_timeout_seconds: float | None = None  # None: the client's own load timeout
    serialized_config: bytes = field(kw_only=True)  # the ModelConfig the JSON is, serialized
    printed: str | None = field(default=None, kw_only=True, compare=False, repr=False)  # config.pbtxt, when printed already

    def parsed_config(self) -> model_config_pb2.ModelConfig:
        """A new message each call: hold it where it is read more than once, keep the value."""
        return model_config_pb2.ModelConfig.FromString(self.serialized_config)

    @functools.cached_property
    def config_pbtxt(self) -> str:
        """config.pbtxt, printed once: for the model's ConfigMap and a model repository."""
        return self.printed if self.printed is not None else config_pbtxt(self.parsed_config())


def config_pbtxt(config: model_config_pb2.ModelConfig) -> str:
    """Triton's text format; protobuf prints fields in declaration order and map keys sorted."""
    return text_format.MessageToString(config)
