"""A pass as values: what it saw (Seen), the entries of its two plans (the one made before the pods are
synced, Plan, and the verdicts concluded after), and what executing them reported (Executed). Deciding
makes the entries; the pass's execute (server/worker.py) runs them, and only it calls the API for them.
The entries it could not apply are what the pass ends with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..api.resources import TritonServer
from ..api.rollout_spec import ProbeSpec
from ..api.status_fields import AutoscalingStatus
from ..decide.rollout_plan import RolloutPlan
from ..decide.seen import ParsedModel, Pass, ServerOutcome
from ..protocol.desired import DesiredModel
from ..render.fleet import Fleet, RenderedServer
from ..render.manifests import KeySecret

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


@dataclass(frozen=True)
class Seen:
    """What a pass observed before it decides: the server and its models as indexed (with the statuses the
    operator wrote and the index may not show yet), their rendering, and the keys."""

    hosted: list[ParsedModel]  # the models whose status this server writes
    guests: list[ParsedModel]  # placed models only loaded here while they move in or drain out
    models: list[ParsedModel]
    server_body: dict[str, Any] | None
    outcome: ServerOutcome
    made: AutoscalingStatus | None  # the autoscaler the operator made, as the server's status last said
    rendered: RenderedServer | None = None  # None: the server is refused (or missing) and no inline one renders
    fleet: Fleet | None = None
    keys: Mapping[KeySecret, str] | None = None  # None: not known (or the server is not made yet)
    made_yet: bool = False  # an inline server's children wait for its uid
    deployed: dict[str, Any] | None = None  # the Deployment as last applied, or read


@dataclass
class Plan:
    """What one pass does before it judges: the children, deletes, the pods' sync and the probes, Events."""

    outcome: ServerOutcome
    actions: list[Any] = field(default_factory=list)
    held: list[str] = field(default_factory=list)  # what waits for something this pass cannot do (a key)
    rollouts: RolloutPlan | None = None
    unwanted_autoscaler: str = ""  # the delete of an autoscaler: until it is done, the status names it


@dataclass
class Executed:
    """What executing a plan reported: the actions not applied, and what the sync, probes and reads saw."""

    unapplied: list[str] = field(default_factory=list)
    this_pass: Pass = field(default_factory=Pass)
    answers: dict[str, dict[str, list[str | None]]] = field(default_factory=dict)
    autoscaling: AutoscalingStatus | None = None
