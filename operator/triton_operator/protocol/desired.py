"""A model at one revision: built once from its TritonModel by render/, carried unchanged to triton/'s
load call, a revision ConfigMap and the status. Plain data, so building it needs no gRPC client."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from google.protobuf import json_format, text_format

from .names import RESTART_PARAMETER
from .triton_proto import model_config_pb2


@dataclass(frozen=True)
class DesiredModel:
    """A model as it should run on every replica. Its config is kept serialized (a live message holds
    many times its bytes, and the operator keeps one value a model for as long as it runs: bench/RESULTS.md,
    "Measurements behind the design");
    each printed form is printed once, when first asked (`validate` and `render` never load, so never
    print the JSON), or taken as printed already: config.pbtxt as the revision was made, the JSON a
    revision ConfigMap kept. No Kubernetes."""

    name: str
    revision: str
    serialized_config: bytes  # the ModelConfig message Triton runs
    files: Mapping[str, bytes] = field(default_factory=dict)
    composing: frozenset[str] = frozenset()  # the models an ensemble's steps run
    load_timeout_seconds: float | None = None  # None: the client's own load timeout
    printed_pbtxt: str | None = field(default=None, kw_only=True, compare=False, repr=False)
    printed_json: str | None = field(default=None, kw_only=True, compare=False, repr=False)

    def parsed_config(self) -> model_config_pb2.ModelConfig:
        """A new message each call: hold it where it is read more than once, keep the value."""
        return model_config_pb2.ModelConfig.FromString(self.serialized_config)

    @functools.cached_property
    def config_pbtxt(self) -> str:
        """config.pbtxt: for the model's ConfigMap and a model repository."""
        return self.printed_pbtxt if self.printed_pbtxt is not None else config_pbtxt(self.parsed_config())

    @functools.cached_property
    def config_json(self) -> str:
        """The load request's `config`."""
        return self.printed_json if self.printed_json is not None else load_request_json(self.parsed_config())

    def restarted(self, restart: int) -> DesiredModel:
        """This model with RESTART_PARAMETER set to `restart`, at the same revision: Triton reloads a model only
        when its config changed, and this is the one change that means nothing else."""
        config = self.parsed_config()
        config.parameters[RESTART_PARAMETER].string_value = str(restart)
        serialized = config.SerializeToString(deterministic=True)
        return dataclasses.replace(self, serialized_config=serialized, printed_pbtxt=None, printed_json=None)


def config_pbtxt(config: model_config_pb2.ModelConfig) -> str:
    """Triton's text format; protobuf prints fields in declaration order and map keys sorted."""
    text: str = text_format.MessageToString(config)
    return text


def load_request_json(config: model_config_pb2.ModelConfig) -> str:
    """The `config` parameter of Triton's load request, with proto field names as Triton documents."""
    request: str = json_format.MessageToJson(config, preserving_proto_field_name=True, sort_keys=True, indent=None)
    return request
