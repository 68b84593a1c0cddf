"""The canary's probe requests: sent to each canary pod of a rollout that bakes (and, to compare, the
same request to a pod on the stable revision), at most requestsPerSecond and maxRequests per pod over
the bake. Inference needs no control key. What a client would count failed goes to the rollout's
judge (decide/rollout_plan.py); one with no meaningful sample is judged on Triton's statistics alone
(triton/probe_requests.py). A decoupled model's probe goes on a gRPC stream, judged on its errors and each
response's outputs, with no expected outputs or stable pod to compare (its answers may vary).

The same probe, once, judges a model's first load on a pod (spec.rollout.probe.onFirstLoad): until it
answers as a client would count answered, the model is not ready on that pod (k8s/pods/pod_sync.py sends it,
decide/readiness_gate.py pod_condition reads the verdict).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import tritonclient.grpc.aio as grpcclient

from ...api.rollout_spec import ProbeSpec, RolloutSpec, effective_rollout, model_probe
from ...api.status_fields import RolloutPhase
from ...decide.rollout_plan import RolloutPlan
from ...decide.seen import ParsedModel, Pod
from ...protocol.desired import DesiredModel
from ...protocol.triton_proto import model_config_pb2 as pb
from ...triton.probe_inputs import Array, NoSample, SampleRequest, WarmupDataError, sample_request, tensor_values
from ...triton.probe_requests import outputs_difference, send_probe
from ...triton.sync import ReplicaReport

logger = logging.getLogger(__name__)


def probes_due(sent: int, max_requests: int, per_second: float, since_last: float | None) -> int:
    """How many probes a pod gets this pass: the rate's share of the time since the last ones (one when
    none were sent yet), up to what the bake has left."""
    left = max(max_requests - sent, 0)
    return min(left, 1 if since_last is None else int(since_last * per_second))


def _canary_answer(
    canary: str | None,
    outputs: Mapping[str, Array],
    expected: Mapping[str, Array],
    stable: Mapping[str, Array] | None,
    tolerance: float,
) -> str | None:
    """Why a canary's answer fails: its own failure, outputs not the expected ones, or ones that differ
    from the stable pod's (only where the stable pod answered)."""
    if canary is not None:
        return canary
    if why := outputs_difference(expected, outputs, tolerance):
        return why
    if stable is not None and (why := outputs_difference(stable, outputs, tolerance)):
        return f"{why} from the stable revision's answer"
    return None


class Prober:
    """A worker's probe requests: when each pod was last probed, and each revision's request as built."""

    def __init__(self) -> None:
        self.last_sent: dict[tuple[str, str, str], float] = {}  # (model uid, revision, pod) -> when
        self.requests: dict[
            tuple[str, str], SampleRequest | None
        ] = {}  # (model uid, revision) -> its request; None: no probes

    async def probe(self, plan: RolloutPlan, pods: Sequence[Pod]) -> dict[str, dict[str, list[str | None]]]:
        """This pass's probes of every rollout that bakes: by model uid, by canary pod, why each failed (None:
        it did not)."""
        addresses = {pod.name: pod.address for pod in pods if pod.address and not pod.deleting}
        in_service = [pod.name for pod in pods if pod.models_ready == "True" and pod.name in addresses]
        jobs: dict[str, dict[str, asyncio.Task[list[str | None]]]] = {}
        baking = {uid for uid, rollout in plan.models.items() if rollout.record.phase == RolloutPhase.BAKING}
        self.last_sent = {key: at for key, at in self.last_sent.items() if key[0] in baking}
        self.requests = {key: request for key, request in self.requests.items() if key[0] in baking}
        async with asyncio.TaskGroup() as group:
            for uid in sorted(baking):
                record, probe, candidate = plan.models[uid].record, plan.models[uid].probe, plan.models[uid].candidate
                config = candidate.parsed_config()
                request = self._request(uid, candidate, config, probe)
                if request is None:
                    continue
                stable = next((pod for pod in in_service if pod not in record.canary_pods), None)
                for pod in record.canary_pods:
                    key = (uid, record.revision, pod)
                    since = time.monotonic() - self.last_sent[key] if key in self.last_sent else None
                    sent = record.probes[pod].sent if pod in record.probes else 0
                    due = probes_due(sent, probe.max_requests, probe.requests_per_second, since)
                    if due and pod in addresses:
                        self.last_sent[key] = time.monotonic()
                        compare_with = (
                            addresses.get(stable)
                            if stable and probe.compare and not config.model_transaction_policy.decoupled
                            else None
                        )
                        jobs.setdefault(uid, {})[pod] = group.create_task(
                            _send(addresses[pod], compare_with, config, request, probe, due)
                        )
        return {uid: {pod: task.result() for pod, task in by_pod.items()} for uid, by_pod in jobs.items()}

    def _request(
        self, uid: str, candidate: DesiredModel, config: pb.ModelConfig, probe: ProbeSpec
    ) -> SampleRequest | None:
        key = (uid, candidate.revision)
        if key not in self.requests:
            self.requests[key] = probe_request(candidate, config, probe)
        return self.requests[key]


def probe_request(model: DesiredModel, config: pb.ModelConfig, probe: ProbeSpec) -> SampleRequest | None:
    """The revision's probe request; None where it gets none (no meaningful sample, maxRequests 0)."""
    if not probe.max_requests:
        return None
    try:
        request = sample_request(config, probe.inputs, model.files.get, np.random.default_rng())
    except WarmupDataError as error:  # Triton refuses the load too: its failure says why
        logger.info("no probe requests for model %s: %s", model.name, error)
        return None
    return None if isinstance(request, NoSample) else request


def first_load_probes(models: Sequence[ParsedModel], server_rollout: RolloutSpec) -> dict[str, ProbeSpec]:
    """By Triton name: the models whose first load on a pod is probed before it counts ready there."""
    probes = {}
    for parsed in models:
        model = parsed.model
        if model is None or parsed.deleting:
            continue
        probe = model_probe(model.spec.rollout)
        if probe.probes_first_load(effective_rollout(model.spec.rollout, server_rollout).strategy):
            probes[model.model_name] = probe
    return probes


@dataclass(frozen=True)
class FirstProbe:
    """A model's first-load probe on one pod: due, or failed at that revision."""

    revision: str
    failure: str | None = None  # None: due


def first_probes(
    kept: Mapping[str, FirstProbe], report: ReplicaReport, desired: Mapping[str, DesiredModel], probed: Collection[str]
) -> dict[str, FirstProbe]:
    """A pod's first-load probes after its sync (`report`), for the models whose first load is `probed`:
    due where a first load ended ok (or any load of one whose probe failed here); a failed one stays while
    the model runs here, and a model no longer ready here forgets its own (its next load is a first load)."""
    ended = {o.action.model: o.action.kind for o in report.outcomes if o.ok and o.action.kind != "unload"}
    probes = {}
    for name in probed:
        state, model, before = report.states.get(name), desired.get(name), kept.get(name)
        if state is None or not state.ready or model is None:
            continue
        if state.revision == model.revision and (ended.get(name) == "load" or (before is not None and name in ended)):
            probes[name] = FirstProbe(model.revision)
        elif before is not None:
            probes[name] = before
    return probes


async def probe_first_load(address: str, model: DesiredModel, probe: ProbeSpec) -> str | None:
    """One probe of a model just loaded on a pod: why it failed, or None (also where it gets no probe)."""
    config = model.parsed_config()
    request = probe_request(model, config, probe)
    if request is None:
        return None
    [failure] = await _send(address, None, config, request, probe, 1)
    return None if failure is None else f"it loaded, but its first probe request failed: '{failure}'"


async def _send(
    canary: str, stable: str | None, config: pb.ModelConfig, request: SampleRequest, probe: ProbeSpec, count: int
) -> list[str | None]:
    """`count` probes, one after the other, to the canary (and the stable pod, to compare)."""
    decoupled = config.model_transaction_policy.decoupled  # its outputs are not kept (triton/probe_requests.py)
    expected = {tensor.name: tensor_values(tensor) for tensor in probe.expected_outputs or []} if not decoupled else {}
    tolerance = probe.compare.tolerance if probe.compare else 0.0
    clients = [grpcclient.InferenceServerClient(address) for address in (canary, stable) if address]
    try:
        failures: list[str | None] = []
        for _ in range(count):
            answers = await asyncio.gather(
                *(send_probe(client, config, request, probe.timeout_seconds) for client in clients)
            )
            reference = answers[1].outputs if len(answers) > 1 and answers[1].failure is None else None
            failures.append(_canary_answer(answers[0].failure, answers[0].outputs, expected, reference, tolerance))
        return failures
    finally:
        for client in clients:
            await client.close()
