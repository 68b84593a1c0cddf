"""The model render/ builds and triton/'s sync loads: plain data, so building it needs no gRPC client."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class DesiredModel:
    """A model as it should run on every replica: plain data, no Kubernetes."""

    name: str
    revision: str
    config_json: str
    files: Mapping[str, bytes] = field(default_factory=dict)
    composing: frozenset[str] = frozenset()  # the models an ensemble's steps run
    load_timeout_seconds: float | None = None  # None: the client's own load timeout
