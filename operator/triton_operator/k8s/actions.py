"""What a pass does, as values: the entries of its two plans (the one made before the pods are synced and
the one concluded after). Deciding makes them; the pass's execute (server/worker.py) runs them, and
only it calls the API for them. An entry it could not apply is what the pass ends with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..api.resources import TritonServer
from ..api.rollout_spec import ProbeSpec
from ..decide.rollout_plan import RolloutPlan
from ..protocol.desired import DesiredModel
from ..render.fleet import RenderedServer

Write = tuple[dict[str, Any], str]  # a child and the digest of its content


@dataclass(frozen=True)
class ApplyChildren:
    """The server's children that changed, created or server-side applied where the operator controls the name."""

    writes: list[Write]

    def __str__(self) -> str:
        return "apply " + ", ".join(f"{obj['kind']}/{obj['metadata']['name']}" for obj, _ in self.writes)


@dataclass(frozen=True)
class Delete:
    """An object the operator made and no longer wants (an autoscaler, a NetworkPolicy, an old revision)."""

    kind: str
    namespace: str
    name: str
    why: str

    def __str__(self) -> str:
        return f"delete {self.kind}/{self.name}"


@dataclass(frozen=True)
class KeepRevision:
    """A stable revision's ConfigMap, written from what the operator holds of it."""

    config_map: dict[str, Any]

    def __str__(self) -> str:
        return f"keep ConfigMap/{self.config_map['metadata']['name']}"


@dataclass(frozen=True)
class SyncPods:
    """Every pod given the models it is to run, over Triton's control API."""

    desired: Mapping[str, DesiredModel]
    keep: set[str]
    managed: set[str]
    control_key: str
    canary: Mapping[str, Mapping[str, DesiredModel]] = field(default_factory=dict)
    first_load: Mapping[str, ProbeSpec] = field(default_factory=dict)

    def __str__(self) -> str:
        return "sync the pods"


@dataclass(frozen=True)
class Probe:
    """This pass's probe requests to the canaries of the rollouts that bake."""

    rollouts: RolloutPlan

    def __str__(self) -> str:
        return "probe the canaries"


@dataclass(frozen=True)
class ReadAutoscaler:
    """The HorizontalPodAutoscaler that scales the server, read for its status."""

    server: TritonServer

    def __str__(self) -> str:
        return "read the autoscaler"


@dataclass(frozen=True)
class ReadMemory:
    """The memory sidecars of the pods whose served models changed, as the interval lets."""

    rendered: RenderedServer

    def __str__(self) -> str:
        return "read the memory sidecars"


@dataclass(frozen=True)
class PatchStatus:
    """A status that changed, written over the one it was computed from."""

    body: Mapping[str, Any]
    status: dict[str, Any]

    def __str__(self) -> str:
        return f"write the status of {self.body['kind']}/{self.body['metadata']['name']}"
