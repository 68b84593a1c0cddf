"""What a pass saw, as plain data: the objects as listed and parsed, the pods, what their syncs reported,
and the server side's findings. The decisions (decide/) read these; k8s/ and local/ fill them."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..api.findings import Finding
from ..api.parse import object_id, parse_resource
from ..api.resources import TritonModel, TritonServer
from ..api.status_fields import PlacementStatus, written_placement
from ..protocol.desired import DesiredModel
from ..triton.batching import ModelStatistics

if TYPE_CHECKING:  # a report is read here, never made: its module runs the syncs over gRPC
    from ..triton.sync import ReplicaReport

ServerKey = tuple[str, str]  # (namespace, TritonServer name)


def body_without_status(body: Mapping[str, Any]) -> dict[str, Any]:
    """The object as input: status is the operator's output, not part of what is parsed."""
    return {key: value for key, value in body.items() if key != "status"}


def parse_server(body: Mapping[str, Any] | None) -> tuple[TritonServer | None, list[Finding]]:
    """A TritonServer as listed, or the findings that refuse it (none when there is no object)."""
    if body is None:
        return None, []
    server, findings = parse_resource(body_without_status(body))
    return server if isinstance(server, TritonServer) else None, findings


@dataclass(frozen=True)
class ParsedModel:
    """A TritonModel as listed (metadata and the status last written) with its spec parsed, or the
    findings that refuse it: the one reading of a model that a pass, its statuses and the handlers share."""

    body: dict[str, Any]
    model: TritonModel | None
    findings: list[Finding]

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> ParsedModel:
        model, findings = parse_resource(body_without_status(body))
        return cls(dict(body), model if isinstance(model, TritonModel) else None, findings)

    # Cached: a pass reads each model's uid and deletion a dozen times, and a parse is of one resourceVersion.
    @functools.cached_property
    def uid(self) -> str:
        uid: str = self.body["metadata"].get("uid", "")
        return uid

    @functools.cached_property
    def object_id(self) -> str:
        return object_id("TritonModel", self.body["metadata"])

    @functools.cached_property
    def deleting(self) -> bool:
        return bool(self.body["metadata"].get("deletionTimestamp"))

    @functools.cached_property
    def placement(self) -> PlacementStatus | None:
        """Where a model with a serverSelector is placed, as last written."""
        return written_placement(self._status.get("placement"))

    @property
    def loaded_name(self) -> str:
        """Triton's name for it: as last loaded (status), else as declared, else the object's name. Read
        field by field: a status that does not validate must not keep a deleted model's release from it."""
        loaded = self._status.get("modelName")
        if isinstance(loaded, str) and loaded:
            return loaded
        return self.model.model_name if self.model else self.body["metadata"]["name"]

    @property
    def _status(self) -> Mapping[str, Any]:
        status = self.body.get("status")
        return status if isinstance(status, Mapping) else {}


@dataclass(frozen=True)
class Pod:
    """A Triton pod as the sync sees it: where its control API is and whether it can take calls."""

    name: str
    uid: str
    address: str | None  # podIP:grpc-port, once the pod has an IP
    deleting: bool
    models_ready: str | None  # our readinessGate condition's status, as last written
    fingerprint: str  # what wakes the server's worker when it changes
    owner: str = (
        ""  # the uid of its controller (its ReplicaSet's): whose pod it is (k8s/watch/indexes.py Indexes.pods_of)
    )
    restarts: int = 0  # its tritonserver container's restartCount
    last_exit: str = ""  # how that container last ended (decide/crashes.py termination), "" if it never did


@dataclass
class Pass:
    """What one reconcile saw and did, for the statuses and the deletion handler."""

    reports: dict[str, ReplicaReport] = field(default_factory=dict)  # pod name -> report
    pods: list[Pod] = field(default_factory=list)
    desired: dict[str, DesiredModel] = field(default_factory=dict)
    ready_pods: list[str] = field(default_factory=list)  # pods whose readinessGate condition is True
    synced: bool = False  # the pods were synced (else the server's memory of its models stays)
    statistics: dict[str, dict[str, ModelStatistics]] = field(
        default_factory=dict
    )  # pod name -> Triton's counters per model
    waiting: list[str] = field(default_factory=list)  # pods whose sync was still running when the pass moved on
    unanswered: list[str] = field(default_factory=list)  # waiting pods whose sync waits for a read they do not answer
    gates_unwritten: list[str] = field(
        default_factory=list
    )  # pods whose readiness condition the API server did not take
    canary: dict[str, dict[str, DesiredModel]] = field(
        default_factory=dict
    )  # pod name -> models it runs at a canary revision
    crashed: dict[str, str] = field(default_factory=dict)  # model -> why it is held back (decide/crashes.py)

    def desired_on(self, pod: str) -> dict[str, DesiredModel]:
        """What the pod runs: every model as desired, canary revisions where it is a canary."""
        return self.desired | self.canary.get(pod, {})

    @property
    def unreachable(self) -> bool:
        """A pod did not answer."""
        return any(report.error for report in self.reports.values())

    @property
    def key_refused(self) -> list[str]:
        """Pods that refused the control key: they were started with another one."""
        return sorted(pod for pod, report in self.reports.items() if report.key_refused)

    @property
    def settled(self) -> bool:
        """Every pod was reached and its readiness written: none waits for an address, is still syncing,
        did not answer, or has a condition the API server did not take."""
        return not any(pod.address is None and not pod.deleting for pod in self.pods) and not (
            self.unreachable or self.waiting or self.gates_unwritten
        )

    def serves(self, model_name: str) -> bool:
        """Every pod that stays is in service and has the model ready at the revision it should run, and
        there is one: a client sent to the server's Service is answered."""
        staying = [pod for pod in self.pods if not pod.deleting]
        return bool(staying) and all(
            pod.name in self.ready_pods
            and (report := self.reports.get(pod.name)) is not None
            and (state := report.states.get(model_name)) is not None
            and state.ready
            and (desired := self.desired_on(pod.name).get(model_name)) is not None
            and state.revision == desired.revision
            for pod in staying
        )

    def loaded_on(self, model_name: str) -> list[str]:
        """Pods that may still hold the model: it is ready there, a load or unload of it runs there, or the
        pod did not answer (yet). A
        pass that synced no pod names none: without a server its pods go with it, and a refused server
        keeps the model in its managedModels, to be unloaded once its pods are synced again."""
        return sorted(
            [
                pod
                for pod, report in self.reports.items()
                if report.error
                or model_name in report.in_flight
                or (model_name in report.states and report.states[model_name].ready)
            ]
            + self.waiting
        )


@dataclass(frozen=True)
class ServerOutcome:
    """The server side of a pass: whether the server exists, every finding of the pure pass, why each
    child that another object's name holds was not written, which writes the API server refused, and
    what is wrong with a key Secret."""

    findings: Sequence[Finding] = ()
    missing: bool = False
    taken: Sequence[str] = ()
    refused: Sequence[str] = ()  # children the API server refused to write: which, and its words
    key_problems: Sequence[str] = ()

    @functools.cached_property
    def server_errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error" and not f.obj.startswith("TritonModel/")]

    def for_model(self, parsed: ParsedModel) -> list[Finding]:
        return list(self._by_object.get(parsed.object_id, ()))

    @functools.cached_property
    def _by_object(self) -> dict[str, list[Finding]]:
        found: dict[str, list[Finding]] = {}
        for finding in self.findings:
            found.setdefault(finding.obj, []).append(finding)
        return found
