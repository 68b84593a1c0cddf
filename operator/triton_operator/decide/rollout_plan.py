"""Canary rollouts: a model's new revision on a share of the pods first, judged on Triton's statistics.

The state of each rollout is the model's `status.rollout` (api/status_fields.py RolloutStatus): `begin`
and `judge` are pure functions from it, the spec and what the pass saw, to the next state, so an
operator restarted mid-bake reads where it stood and goes on. k8s/rollouts/rollout_writes.py executes them: it keeps
the revision the other pods run in a ConfigMap the model owns (render/revisions.py), so a rollback
loads it again exactly as it ran, and tells each verdict (Events, metrics).

Triton starts a model's counters from zero when it loads a revision, so a canary pod's counters are
the new revision's alone; the window of every pod starts from the counters written in `baseline`
when the bake began.

Triton counts a python model's error response as a success, so the bake also sends probe requests
(k8s/rollouts/canary_prober.py); decide/probe_verdicts.py tallies and judges their answers.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..api.rollout_spec import UNSET_PROBE, ProbeSpec, RolloutSpec
from ..api.status_fields import RolloutPhase, RolloutStatus, WindowCounters
from ..protocol.desired import DesiredModel
from ..triton.batching import ModelStatistics
from .probe_verdicts import probe_failure, probe_figures, tally

if TYPE_CHECKING:  # a report is read here, never made: its module runs the syncs over gRPC
    from ..triton.sync import ReplicaReport

STABLE, PROGRESSING, BAKING, ROLLED_BACK = (
    RolloutPhase.STABLE,
    RolloutPhase.PROGRESSING,
    RolloutPhase.BAKING,
    RolloutPhase.ROLLED_BACK,
)
IN_FLIGHT = frozenset({PROGRESSING, BAKING})


def timestamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC)


def begin(
    record: RolloutStatus | None,
    spec: RolloutSpec,
    revision: str,
    stable_kept: bool,
    in_service: Sequence[str],
    live: Sequence[str],
) -> RolloutStatus | None:
    """The rollout state for a spec asking for `revision`, before the pods are synced. `stable_kept`:
    the record's stable revision can be loaded again; `in_service`: pods whose readiness gate is
    True; `live`: every pod that can take control calls."""
    if spec.strategy != "Canary":
        return None
    if record is None:  # nothing ran under this strategy yet: the first revision is the stable one
        return RolloutStatus(phase=STABLE, revision=revision, stable_revision=revision)
    if revision == record.stable_revision:
        if record.phase == STABLE and record.revision == revision:
            return record
        message = (
            "" if record.phase == STABLE else f"the spec is back at revision {revision}, which serves on every pod"
        )
        return RolloutStatus(
            phase=STABLE,
            revision=revision,
            stable_revision=revision,
            previous_revision=record.previous_revision,
            message=message,
        )
    if revision == record.revision and record.phase == ROLLED_BACK:
        return record  # without the stable revision kept, the model is left as it runs (RolloutPlan.keep)
    if not stable_kept:
        message = (
            f"revision {record.stable_revision} is not kept (its ConfigMap is gone or edited), "
            f"so nothing to roll back to: {revision} is applied at once"
        )
        return RolloutStatus(
            phase=STABLE,
            revision=revision,
            stable_revision=revision,
            previous_revision=record.stable_revision,
            message=message,
        )
    if revision == record.revision and record.phase in IN_FLIGHT:
        canaries = [pod for pod in record.canary_pods if pod in live]
        if canaries:
            return record if canaries == record.canary_pods else record.model_copy(update={"canary_pods": canaries})
    ready = sorted(in_service)
    if not ready:
        message = "waiting for a pod in service to be the canary"
        return RolloutStatus(
            phase=PROGRESSING,
            revision=revision,
            stable_revision=record.stable_revision,
            previous_revision=record.previous_revision,
            message=message,
        )
    canaries = ready[: spec.canary_count(len(ready))]
    message = f"loading revision {revision} on {_pods(canaries)}; the other pods keep {record.stable_revision}"
    return RolloutStatus(
        phase=PROGRESSING,
        revision=revision,
        stable_revision=record.stable_revision,
        previous_revision=record.previous_revision,
        canary_pods=canaries,
        message=message,
    )


def _ms_per_request(window: ModelStatistics) -> float:
    """Time in Triton (queue and compute) per successful request."""
    return window.request_ns / window.requests / 1e6 if window.requests else 0.0


def _counters(statistics: ModelStatistics) -> WindowCounters:
    return WindowCounters(requests=statistics.requests, failures=statistics.failures, request_ns=statistics.request_ns)


def _window(now: ModelStatistics, start: WindowCounters | None) -> ModelStatistics:
    """The counters' change since `start`; the counters themselves when they went down (a reload or a
    restart started them again from zero)."""
    if start is None:
        return now
    return (
        now.minus(ModelStatistics(requests=start.requests, failures=start.failures, request_ns=start.request_ns)) or now
    )


@dataclass(frozen=True)
class Verdict:
    record: RolloutStatus
    outcome: Literal["promoted", "rolled_back"] | None = None  # when this pass decided
    bake_seconds: float = 0.0


def judge(
    record: RolloutStatus,
    spec: RolloutSpec,
    model: str,
    reports: Mapping[str, ReplicaReport],
    statistics: Mapping[str, Mapping[str, ModelStatistics]],
    now: datetime.datetime,
    probe: ProbeSpec | None = None,
    answers: Mapping[str, Sequence[str | None]] | None = None,
) -> Verdict:
    """The rollout after a pass that synced the pods: the bake begins once every canary serves the new
    revision; it is rolled back as soon as the canary fails too many requests or probe requests
    (`answers`: this pass's probes of a bake, by pod), or Triton refuses its load, and otherwise
    judged once bakeSeconds are over and minRequests were answered."""
    if record.phase not in IN_FLIGHT or not record.canary_pods:
        return Verdict(record)
    for pod in record.canary_pods:
        report = reports.get(pod)
        state = report.states.get(model) if report else None
        if (
            report is not None
            and model in report.failed
            and not (state and state.ready and state.revision == record.revision)
        ):
            why = f"Triton refused revision {record.revision} on pod {pod}: {report.failed[model]}"
            return _rolled_back(record, why, now)
    if record.phase == PROGRESSING:
        serving = all(
            pod in reports
            and (state := reports[pod].states.get(model)) is not None
            and state.ready
            and state.revision == record.revision
            for pod in record.canary_pods
        )
        if not serving:
            return Verdict(record)
        baseline = {
            pod: _counters(by_model[model]) for pod, by_model in sorted(statistics.items()) if model in by_model
        }
        message = f"baking revision {record.revision} on {_pods(record.canary_pods)} for {spec.bake_seconds}s"
        record = record.model_copy(
            update={"phase": BAKING, "bake_started_at": timestamp(now), "baseline": baseline, "message": message}
        )
        # and judged at once: with bakeSeconds and minRequests 0 it is promoted in this same pass
    elif answers:
        record = record.model_copy(update={"probes": tally(record.probes, answers)})
    assert record.bake_started_at is not None
    baked = (now - parse_timestamp(record.bake_started_at)).total_seconds()
    if failure := probe_failure(
        record.probes, record.canary_pods, probe or UNSET_PROBE, spec.max_failure_ratio, baked >= spec.bake_seconds
    ):
        return _rolled_back(record, failure, now)
    if any(pod not in statistics or model not in statistics[pod] for pod in record.canary_pods):
        return Verdict(record)  # a canary pod was not read this pass: judged on the next
    windows = {
        pod: _window(by_model[model], record.baseline.get(pod))
        for pod, by_model in statistics.items()
        if model in by_model
    }
    canary = sum((windows[pod] for pod in record.canary_pods), ModelStatistics())
    others = sum((window for pod, window in windows.items() if pod not in record.canary_pods), ModelStatistics())
    where = f"on {_pods(record.canary_pods)}"
    answered = canary.requests + canary.failures  # requests Triton answered, with success or failure
    ratio = canary.failures / answered if answered else 0.0
    if answered >= max(spec.min_requests, 1) and ratio > spec.max_failure_ratio:
        why = f"{canary.failures} of {answered} requests failed {where} ({ratio:.1%} > {spec.max_failure_ratio:.1%})"
        return _rolled_back(record, why, now)
    figures = f"{answered} requests, {canary.failures} failed {where}{probe_figures(record.probes, record.canary_pods)}"
    if baked < spec.bake_seconds:
        return Verdict(
            _waiting(record, f"baking revision {record.revision}: {figures} after {baked:.0f} of {spec.bake_seconds}s")
        )
    if answered < spec.min_requests:
        if baked < spec.bake_seconds + spec.max_wait_seconds:
            message = f"waiting for traffic: {figures}, {spec.min_requests} needed"
        else:
            message = (
                f"not enough traffic to judge revision {record.revision}: {figures} after {baked:.0f}s, "
                f"{spec.min_requests} needed; holding: send traffic or lower minRequests, set strategy "
                "AllAtOnce to promote it, or change the spec back"
            )
            return Verdict(record.model_copy(update={"message": message, "holding": True}))
        return Verdict(_waiting(record, message))
    latency = (
        f"time in Triton {_ms_per_request(canary):.1f} ms per request against "
        f"{_ms_per_request(others):.1f} ms on the other pods"
    )
    if spec.max_latency_ratio is not None and canary.requests and others.requests:
        slower = _ms_per_request(canary) / _ms_per_request(others) if _ms_per_request(others) else 0.0
        if slower > spec.max_latency_ratio:
            return _rolled_back(record, f"{latency} ({slower:.1f}x > {spec.max_latency_ratio:g}x) {where}", now)
    if not others.requests:
        latency = "latency not compared: the other pods answered no request in the window"
    message = f"revision {record.revision} promoted after {baked:.0f}s: {figures} ({ratio:.1%}); {latency}"
    promoted = RolloutStatus(
        phase=STABLE,
        revision=record.revision,
        stable_revision=record.revision,
        previous_revision=record.stable_revision,
        message=message,
    )
    return Verdict(promoted, "promoted", baked)


def _waiting(record: RolloutStatus, message: str) -> RolloutStatus:
    """The bake goes on: a hold ends when the spec gives it more time (bakeSeconds, maxWaitSeconds)."""
    return record.model_copy(update={"message": message, "holding": None})


def _rolled_back(record: RolloutStatus, why: str, now: datetime.datetime) -> Verdict:
    baked = (now - parse_timestamp(record.bake_started_at)).total_seconds() if record.bake_started_at else 0.0
    message = (
        f"revision {record.revision} rolled back: {why}; revision "
        f"{record.stable_revision} serves on every pod. Edit the spec to try again"
    )
    rolled_back = record.model_copy(
        update={"phase": ROLLED_BACK, "message": message, "baseline": {}, "probes": {}, "holding": None}
    )
    return Verdict(rolled_back, "rolled_back", baked)


def assignment(
    record: RolloutStatus | None, candidate: DesiredModel, stable: DesiredModel | None
) -> tuple[DesiredModel, list[str]]:
    """What every pod runs for the model, and the canary pods that run `candidate` instead."""
    if record is None or stable is None or record.stable_revision == candidate.revision:
        return candidate, []
    return stable, list(record.canary_pods) if record.phase in IN_FLIGHT else []


def _pods(names: Sequence[str]) -> str:
    return ("pod " if len(names) == 1 else "pods ") + ", ".join(names)


@dataclass
class ModelRollout:
    """One canary model's rollout in a pass: where it stands, what it is judged on, and how it was last written."""

    name: str  # its Triton name
    spec: RolloutSpec
    probe: ProbeSpec  # its probe requests
    candidate: DesiredModel  # the spec's revision
    record: RolloutStatus
    written: RolloutStatus | None  # its rollout as last written

    @property
    def started(self) -> bool:
        """This pass began a canary (a RolloutStarted Event says so)."""
        written = self.written
        return self.record.phase == PROGRESSING and (
            written is None or written.revision != self.record.revision or written.phase not in IN_FLIGHT
        )


@dataclass
class RolloutPlan:
    """A pass's rollouts: what each pod runs, and each canary model's rollout (by model uid)."""

    desired: dict[str, DesiredModel]
    canary: dict[str, dict[str, DesiredModel]] = field(
        default_factory=dict
    )  # pod name -> model name -> its canary revision
    models: dict[str, ModelRollout] = field(default_factory=dict)
    keep: set[str] = field(
        default_factory=set
    )  # models left as they run: rolled back, and the revision they run is not kept

    def add(
        self,
        uid: str,
        name: str,
        spec: RolloutSpec,
        probe: ProbeSpec,
        candidate: DesiredModel,
        written: RolloutStatus | None,
        stable: DesiredModel | None,
        in_service: Sequence[str],
        live: Sequence[str],
    ) -> ModelRollout | None:
        """Plan one Canary model from its rollout as last written: its state before the sync, and what
        every pod runs for it (`stable`: the record's stable revision as it ran, None where it is not
        kept). None when the model is left as it runs."""
        record = begin(written, spec, candidate.revision, stable is not None, in_service, live)
        assert record is not None
        if record.phase == ROLLED_BACK and stable is None:
            del self.desired[name]
            self.keep.add(name)
            return None
        runs, canaries = assignment(record, candidate, stable)
        self.desired[name] = runs
        for pod in canaries:
            self.canary.setdefault(pod, {})[name] = candidate
        rollout = self.models[uid] = ModelRollout(name, spec, probe, candidate, record, written)
        return rollout

    def judge(
        self,
        reports: Mapping[str, ReplicaReport],
        statistics: Mapping[str, Mapping[str, ModelStatistics]],
        now: datetime.datetime,
        answers: Mapping[str, Mapping[str, Sequence[str | None]]],
    ) -> list[tuple[str, Verdict]]:
        """Judge every rollout on what the sync saw and the probes' `answers` (by model uid); the
        verdicts that promoted or rolled back (by model uid): the pods change in the next pass."""
        decided = []
        for uid, rollout in self.models.items():
            verdict = judge(
                rollout.record, rollout.spec, rollout.name, reports, statistics, now, rollout.probe, answers.get(uid)
            )
            rollout.record = verdict.record
            if verdict.outcome is not None:
                decided.append((uid, verdict))
        return decided

    @property
    def records(self) -> dict[str, RolloutStatus]:
        return {uid: rollout.record for uid, rollout in self.models.items()}

    @property
    def in_flight(self) -> bool:
        return any(rollout.record.phase in IN_FLIGHT for rollout in self.models.values())
