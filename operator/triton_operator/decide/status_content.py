"""Statuses of both kinds, from what a pass saw (seen.py): pure functions of plain data. The pods'
readinessGate condition is decide/readiness_gate.py's."""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..api.findings import Finding
from ..api.resources import TritonModel
from ..api.status_fields import (
    AutoscalingStatus,
    BatchingStatus,
    Condition,
    MemoryStatus,
    PlacementStatus,
    ReplicaModelState,
    RolloutPhase,
    RolloutStatus,
    TritonModelStatus,
    TritonServerStatus,
)
from ..memory.attribution import MeasuredMemory
from ..render import moves
from ..render.autoscaler_manifests import pod_selector
from ..render.fleet import RenderedServer
from ..render.model_rendering import RenderedModel
from ..render.placement import MemorySource, model_figure
from ..triton.batching import BatchingSummary
from . import conditions as c
from .rollout_plan import IN_FLIGHT
from .seen import ParsedModel, Pass, Pod, ServerKey, ServerOutcome


def _describe(findings: Sequence[Finding]) -> str:
    return "; ".join(f"{f.path}: {f.message}" for f in findings)


def _config_valid(findings: Sequence[Finding]) -> Condition:
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        reason = c.FILES_MISSING if all(f.path.startswith("spec.files") for f in errors) else c.INVALID_SPEC
        return c.condition(c.CONFIG_VALID, False, reason, _describe(errors))
    warnings = [f for f in findings if f.severity == "warning"]
    return c.condition(c.CONFIG_VALID, True, c.VALID, f"warnings: {_describe(warnings)}" if warnings else "")


def _replica_state(pod: Pod, seen: Pass, name: str) -> ReplicaModelState:
    report = seen.reports.get(pod.name)
    if pod.name in seen.unanswered:
        return ReplicaModelState(
            pod=pod.name,
            state="UNREACHABLE",
            reason="its control API does not answer (a frozen or overloaded pod); it serves as it was",
        )
    if pod.name in seen.waiting:
        return ReplicaModelState(pod=pod.name, state="LOADING", reason="its sync is still running")
    if report is None:
        return ReplicaModelState(pod=pod.name, state="PENDING", reason="the pod has no address yet")
    if report.error:
        return ReplicaModelState(pod=pod.name, state="UNREACHABLE", reason=report.error)
    state = report.states.get(name)
    failed = report.failed.get(name, "")
    if name in report.probe_failed:
        return ReplicaModelState(
            pod=pod.name,
            state="UNAVAILABLE",
            version=state.version if state else "",
            revision=state.revision if state else "",
            reason=report.probe_failed[name],
        )
    if state is not None and state.ready:
        return ReplicaModelState(
            pod=pod.name,
            state="READY",
            version=state.version,
            revision=state.revision,
            reason=failed or report.healed.get(name, ""),
        )
    if failed:
        return ReplicaModelState(pod=pod.name, state="UNAVAILABLE", reason=failed)
    return ReplicaModelState(
        pod=pod.name,
        state="LOADING",
        reason="a load is running" if name in report.in_flight else state.reason if state else "",
    )


def _loaded(
    states: Sequence[ReplicaModelState], expected: Mapping[str, str], probe_failed: Collection[str] = ()
) -> Condition:
    """Loaded: every pod runs the revision it should (`expected`, by pod: a canary's may differ).
    `probe_failed`: the pods where it loaded but failed its first probe (ProbeFailed where those are all
    the failures)."""
    if not states:
        return c.condition(c.LOADED, False, c.NO_PODS, "the server has no pods yet")
    failed = [s for s in states if _failed(s, expected)]
    if failed:
        reason = c.PROBE_FAILED if all(s.pod in probe_failed for s in failed) else c.LOAD_FAILED
        return c.condition(c.LOADED, False, reason, "; ".join(f"pod {s.pod}: {s.reason}" for s in failed))
    unreachable = [s for s in states if s.state == "UNREACHABLE"]
    if unreachable:
        return c.condition(
            c.LOADED, False, c.POD_UNREACHABLE, "; ".join(f"pod {s.pod}: {s.reason}" for s in unreachable)
        )
    current = _current(states, expected)
    revisions = " and ".join(sorted(set(expected.values())))
    if current < len(states):
        return c.condition(
            c.LOADED, False, c.LOADING, f"revision {revisions} is ready on {current} of {len(states)} pods"
        )
    return c.condition(c.LOADED, True, c.LOADED_EVERYWHERE, f"revision {revisions} is ready on {len(states)} pods")


def _failed(state: ReplicaModelState, expected: Mapping[str, str]) -> bool:
    """Triton refused the revision the pod should run (its load or its first probe failed there)."""
    return bool(state.reason) and (
        state.state == "UNAVAILABLE" or (state.state == "READY" and state.revision != expected[state.pod])
    )


def _joined(states: list[ReplicaModelState], seen: Pass, expected: Mapping[str, str]) -> list[ReplicaModelState]:
    """The pods a model's status counts. A pod joining a server that serves already (its readinessGate not
    yet True) is counted once it has joined, or where the model failed on it: at each step of its start
    (no address, loading) it would turn every model's Ready False and rewrite every model's status, while
    the pods in service serve them as before (the server's status names the pods joining)."""
    if not any(state.pod in seen.ready_pods for state in states):
        return states
    return [state for state in states if state.pod in seen.ready_pods or _failed(state, expected)]


def _current(states: Sequence[ReplicaModelState], expected: Mapping[str, str]) -> int:
    return sum(1 for s in states if s.state == "READY" and s.revision == expected[s.pod])


FAILED_LOADS = (c.LOAD_FAILED, c.PROBE_FAILED, c.CRASHED_SERVER)


@dataclass(frozen=True)
class ModelOutcome:
    state: str  # Ready, Loading, Failed, Invalid: the metric's label
    conditions: list[Condition]
    rendered: RenderedModel | None = None
    replica_states: list[ReplicaModelState] = field(default_factory=list)
    replicas: str | None = None
    healed: str = ""  # by pod: found failing every request, and reloaded

    @property
    def load_failure(self) -> str:
        """Triton's refusals of the model's load, by pod, when its Loaded condition says it failed."""
        return next(
            (cond.message for cond in self.conditions if cond.type == c.LOADED and cond.reason in FAILED_LOADS), ""
        )

    @classmethod
    def of(
        cls,
        parsed: ParsedModel,
        server: ServerKey,
        rendered: RenderedServer | None,
        seen: Pass,
        outcome: ServerOutcome,
    ) -> ModelOutcome:
        """The model's conditions on `server` (namespace, name), from what the pass saw."""
        valid = _config_valid([*parsed.findings, *outcome.for_model(parsed)])
        if outcome.missing:
            message = f"no TritonServer '{server[1]}' in namespace '{server[0]}' yet; the model waits for it"
            loaded = c.condition(c.LOADED, False, c.SERVER_NOT_FOUND, message)
            return cls("Loading", [valid, loaded, c.ready(valid, loaded)])
        if outcome.server_errors:
            loaded = c.condition(c.LOADED, False, c.SERVER_INVALID, _describe(outcome.server_errors))
            return cls("Loading", [valid, loaded, c.ready(valid, loaded)])
        model = parsed.model
        mine = rendered.rendering_of(model) if rendered is not None and model is not None else None
        if mine is None or valid.status != "True":
            loaded = c.condition(
                c.LOADED,
                False,
                valid.reason,
                "not loaded at this generation: the last valid version keeps running where it was loaded",
            )
            return cls("Invalid", [valid, loaded, c.ready(valid, loaded)])
        name = mine.name
        spec_revision = mine.revision
        # A terminating pod is out of its Service, draining: the model is as ready as the pods that stay.
        staying = [pod for pod in seen.pods if not pod.deleting]
        runs = {pod.name: seen.desired_on(pod.name).get(name) for pod in staying}
        expected = {pod: spec_revision if desired is None else desired.revision for pod, desired in runs.items()}
        states = _joined([_replica_state(pod, seen, name) for pod in staying], seen, expected)
        loaded = _loaded(states, expected, [pod for pod, report in seen.reports.items() if name in report.probe_failed])
        if why := seen.crashed.get(name):  # held back: not loaded where it is not ready, and Triton is not asked
            held = {"state": "UNAVAILABLE", "reason": why}
            states = [s if s.state == "READY" else s.model_copy(update=held) for s in states]
            loaded = c.condition(c.LOADED, False, c.CRASHED_SERVER, why)
        ready = c.ready(valid, loaded)
        current = _current(states, expected)
        state = "Ready" if ready.status == "True" else "Failed" if loaded.reason in FAILED_LOADS else "Loading"
        healed = "; ".join(
            f"pod {pod}: {report.healed[name]}" for pod, report in sorted(seen.reports.items()) if name in report.healed
        )
        crashed = [c.condition(c.CRASHED_SERVER, True, c.SERVER_DIED, why)] if why else []
        return cls(state, [valid, loaded, ready, *crashed], mine, states, f"{current}/{len(states)}", healed)


def model_status(
    body: Mapping[str, Any],
    outcome: ModelOutcome,
    server: str,
    shm_bytes: int | None = None,
    batching: BatchingSummary | None = None,
    rollout_record: RolloutStatus | None = None,
    memory: MemoryStatus | None = None,
    clock: c.Clock = c.now,
) -> dict[str, Any]:
    """The TritonModel's status; `batching` adds the figures and, when dynamic batching is on, its
    verdict; `rollout_record` (the Canary strategy) where its rollout stands, and RolloutHealthy;
    `memory` the figure placement counts for it."""
    previous = TritonModelStatus.model_validate(body.get("status") or {})
    generation = body["metadata"].get("generation")
    rendered = outcome.rendered
    conditions = list(outcome.conditions)
    if batching is not None and batching.reason != c.DYNAMIC_BATCHING_OFF:
        conditions.append(Condition.model_validate(batching.condition()))
    if rollout_record is not None:
        conditions.append(_rollout_healthy(rollout_record))
    conditions += [kept for kept in previous.conditions if kept.type == c.PLACED]  # the placement's own, as it wrote it
    status = TritonModelStatus(
        observed_generation=generation,
        conditions=c.merge_conditions(previous.conditions, conditions, generation, clock),
        server=server,
        model_name=rendered.name if rendered else previous.model_name,
        replicas=outcome.replicas,
        replica_states=outcome.replica_states,
        config_hash=rendered.revision if rendered else previous.config_hash,
        shared_memory_bytes=shm_bytes,
        batching=BatchingStatus.model_validate(batching.to_status())
        if batching is not None and batching.executions
        else None,
        rollout=rollout_record,
        memory=memory,
        placement=previous.placement,
    )
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


def placed_condition(placement: PlacementStatus) -> Condition:
    placed = placement.reason != moves.UNSCHEDULABLE
    return c.condition(c.PLACED, placed, placement.reason, placement.message or f"on TritonServer {placement.server}")


def placement_status(
    body: Mapping[str, Any], placement: PlacementStatus, memory: MemoryStatus | None, clock: c.Clock = c.now
) -> dict[str, Any]:
    """A serverSelector model's status with its placement: Placed and `placement` set in what its
    server's worker wrote; on no server, all of it, since no worker writes it (Ready then says why)."""
    previous = TritonModelStatus.model_validate(body.get("status") or {})
    generation = body["metadata"].get("generation")
    placed = placed_condition(placement)
    if placement.server is None:
        ready = c.condition(c.READY, False, placed.reason, placed.message)
        conditions = c.merge_conditions(previous.conditions, [placed, ready], generation, clock)
        status = TritonModelStatus(
            observed_generation=generation, conditions=conditions, memory=memory or previous.memory, placement=placement
        )
    else:
        others = [kept for kept in previous.conditions if kept.type != c.PLACED]
        conditions = [*others, *c.merge_conditions(previous.conditions, [placed], generation, clock)]
        status = previous.model_copy(update={"conditions": conditions, "placement": placement})
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


def memory_figure(model: TritonModel | None, measured: MeasuredMemory | None) -> MemoryStatus | None:
    """What a model counts for: each part as measured on its pods, else as in spec.memory, else the
    default. Measured when any part was: a part nothing measured (GPU memory where neither Triton nor
    the sidecar could say, host memory of a model with no python stubs) is the declared one even then.
    None for a refused spec."""
    if model is None:
        return None
    cpu, gpu, source = model_figure(model)
    if measured is None or (measured.cpu is None and measured.gpu is None):
        return _declared_figure(cpu, gpu, source)
    return MemoryStatus(
        cpu_bytes=cpu if measured.cpu is None else measured.cpu[0],
        gpu_bytes=gpu if measured.gpu is None else measured.gpu[0],
        source=MemorySource.MEASURED.value,
        measured_at=measured.measured_at,
    )


@functools.lru_cache(maxsize=256)
def _declared_figure(cpu: int, gpu: int, source: MemorySource) -> MemoryStatus:
    """One object for each figure declared (most models share a few), made once rather than every pass."""
    return MemoryStatus(cpu_bytes=cpu, gpu_bytes=gpu, source=source.value)


def _rollout_healthy(record: RolloutStatus) -> Condition:
    """True once one revision serves everywhere, Unknown while a canary loads or is judged, False after a
    rollback (Ready stays True then: the previous revision serves)."""
    if record.phase == RolloutPhase.ROLLED_BACK:
        return c.condition(c.ROLLOUT_HEALTHY, False, c.ROLLED_BACK, record.message)
    if record.phase in IN_FLIGHT:
        reason = c.NOT_ENOUGH_TRAFFIC if record.holding else record.phase.value
        return Condition(type=c.ROLLOUT_HEALTHY, status="Unknown", reason=reason, message=record.message)
    return c.condition(c.ROLLOUT_HEALTHY, True, c.PROMOTED if record.previous_revision else c.STABLE, record.message)


def server_status(
    body: Mapping[str, Any],
    rendered: RenderedServer | None,
    seen: Pass,
    outcome: ServerOutcome,
    autoscaling: AutoscalingStatus | None,
    clock: c.Clock = c.now,
) -> dict[str, Any]:
    previous = TritonServerStatus.model_validate(body.get("status") or {})
    generation = body["metadata"].get("generation")
    spec_replicas = (body.get("spec") or {}).get("replicas", 1)
    errors = outcome.server_errors
    valid = c.condition(c.CONFIG_VALID, not errors, c.INVALID_SPEC if errors else c.VALID, _describe(errors))
    shm_findings = [f for f in outcome.findings if f.path == "spec.sharedMemory.sizeLimit"]
    shm_ok = rendered is None or rendered.shm.sufficient
    shm = c.condition(
        c.SHARED_MEMORY_SUFFICIENT, shm_ok, c.SUFFICIENT if shm_ok else c.TOO_SMALL, _describe(shm_findings)
    )
    ready_pods = seen.ready_pods
    unready = [pod.name for pod in seen.pods if pod.name not in ready_pods and not pod.deleting]
    unanswered = sorted([name for name, report in seen.reports.items() if report.error] + seen.waiting)
    if not seen.pods:
        models_ready = c.condition(c.MODELS_READY, False, c.NO_PODS, "no pods yet")
    elif unready:
        silent = [name for name in unready if name in unanswered]  # a joining pod's models' statuses leave it out
        message = f"pods without every model: {', '.join(unready)}"
        if silent:
            message += f"; not answering the control API: {', '.join(silent)}"
        models_ready = c.condition(c.MODELS_READY, False, c.PODS_NOT_READY, message)
    elif unanswered:
        message = (
            f"pods that have not answered the control API yet (left in service as they were): {', '.join(unanswered)}"
        )
        models_ready = c.condition(c.MODELS_READY, False, c.POD_UNREACHABLE, message)
    else:
        models_ready = c.condition(c.MODELS_READY, True, c.ALL_PODS_READY, f"{len(ready_pods)} pods have every model")
    if outcome.taken:
        owned = c.condition(c.CHILDREN_OWNED, False, c.NAME_TAKEN, "; ".join(outcome.taken))
    elif outcome.refused:
        owned = c.condition(c.CHILDREN_OWNED, False, c.WRITE_REFUSED, "; ".join(outcome.refused))
    else:
        owned = c.condition(c.CHILDREN_OWNED, True, c.OWNED)
    keys = c.condition(
        c.KEY_SECRETS_VALID,
        not outcome.key_problems,
        c.KEY_SECRET_INVALID if outcome.key_problems else c.VALID,
        "; ".join(outcome.key_problems),
    )
    conditions = [valid, owned, keys, shm, models_ready]
    if len(ready_pods) < spec_replicas and models_ready.status == "True":
        models_ready = c.condition(
            c.MODELS_READY, False, c.PODS_NOT_READY, f"{len(ready_pods)} of {spec_replicas} pods ready"
        )
        conditions[-1] = models_ready
    if seen.synced:
        managed = set(seen.desired) | {name for report in seen.reports.values() for name in report.managed}
        managed |= set(previous.managed_models) if seen.waiting else set()  # a waiting pod may still hold any of them
    else:
        managed = set(previous.managed_models)
    status = TritonServerStatus(
        observed_generation=generation,
        conditions=c.merge_conditions(previous.conditions, [*conditions, c.ready(*conditions)], generation, clock),
        replicas=spec_replicas,
        ready_replicas=len(ready_pods),
        models=sorted(m.name for m in rendered.models) if rendered else previous.models,
        managed_models=sorted(managed),
        shared_memory_bytes=rendered.shm.size_limit_bytes if rendered else previous.shared_memory_bytes,
        selector=pod_selector(rendered.server) if rendered else previous.selector,
        autoscaling=autoscaling,
    )
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)
