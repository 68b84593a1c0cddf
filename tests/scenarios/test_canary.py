"""Canary rollouts through the operator, on three real tritonserver pods with clients sending to each.

Every scenario starts from the add model serving revision `old` on triton-0, -1 and -2 with the
Canary strategy (one canary pod: the first in service as the operator last saw the pods, which is
read from the model's status), changes it, and reads what each pod's Triton serves, the clients'
failures by pod, and the operator's control calls by pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.models import ERROR_RESPONSE, add_code
from tests.support.operator import Cluster, Pods, api_server, assert_valid_objects, load_calls, running_operator
from tests.support.resources import ADD_CONFIG, FILES, MODEL, SERVER
from tests.support.serving import RequestLoop, add_pod, answers_with, revision_on
from triton_operator.local.tritonserver import LocalTriton

pytestmark = pytest.mark.triton

PODS = ("triton-0", "triton-1", "triton-2")
ROLLOUT = {
    "strategy": "Canary",
    "pods": 1,
    "bakeSeconds": 3,
    "minRequests": 20,
    "maxFailureRatio": 0.01,
    "maxLatencyRatio": 2,
}
SETTINGS = {"rollout_poll_seconds": 0.5}


def rollout(cluster: Cluster) -> dict[str, Any]:
    return ((cluster.get("TritonModel", "add") or {}).get("status") or {}).get("rollout") or {}


def in_phase(cluster: Cluster, phase: str, revision: str | None = None) -> dict[str, Any] | None:
    record = rollout(cluster)
    return record if record.get("phase") == phase and revision in (None, record.get("revision")) else None


async def revisions(tritons: dict[str, LocalTriton]) -> dict[str, str]:
    return {pod: await asyncio.to_thread(revision_on, triton) for pod, triton in tritons.items()}


class Fleet:
    """The cluster, its three pods' tritonservers, and the revision they all serve at the start."""

    def __init__(self, cluster: Cluster, tritons: dict[str, LocalTriton], old: str):
        self.cluster, self.tritons, self.old = cluster, tritons, old
        self.urls = {name: triton.grpc_url for name, triton in tritons.items()}

    async def serving(self) -> dict[str, str]:
        return await revisions(self.tritons)

    async def all_serve(self, revision: str) -> bool:
        return set((await self.serving()).values()) == {revision}


async def start_fleet(
    cluster: Cluster, pods: Pods, code: bytes = add_code(), config: dict[str, Any] | None = None, **rollout_changes: Any
) -> Fleet:
    server = copy.deepcopy(SERVER)
    server["spec"]["replicas"] = len(PODS)
    files = copy.deepcopy(FILES)
    files["data"]["model.py"] = code.decode()
    model = copy.deepcopy(MODEL)
    model["spec"]["rollout"] = ROLLOUT | rollout_changes
    model["spec"]["config"] = config or model["spec"]["config"]
    for obj in (server, files, model):
        await cluster.create(obj)
    key = await cluster.wait("the control key", lambda: cluster.control_key("triton"))
    for name in PODS:
        await add_pod(cluster, pods, name, key)
    stable = await cluster.wait(
        "revision old stable on 3 pods",
        lambda: (
            in_phase(cluster, "Stable")
            and (cluster.get("TritonModel", "add") or {})["status"].get("replicas") == "3/3"
            and rollout(cluster)
        ),
    )
    await cluster.wait(
        "every pod in service",
        lambda: all((cluster.pod_condition(name) or {}).get("status") == "True" for name in PODS),
    )
    return Fleet(cluster, {name: pods.tritons[name] for name in PODS}, stable["stableRevision"])


async def new_code(cluster: Cluster, code: bytes) -> None:
    """A new model.py through a ConfigMap of its own that the model then names."""
    files = copy.deepcopy(FILES)
    files["metadata"]["name"] = "add-files-2"
    files["data"]["model.py"] = code.decode()
    await cluster.create(files)
    await cluster.patch(
        "TritonModel",
        "add",
        {
            "spec": {
                "files": {
                    "configMapRef": {"name": "add-files-2", "items": MODEL["spec"]["files"]["configMapRef"]["items"]}
                }
            }
        },
    )


def condition(cluster: Cluster, type_: str) -> dict[str, Any]:
    return cluster.condition("TritonModel", "add", type_) or {}


async def rolled_back(fleet: Fleet) -> dict[str, Any]:
    """Wait for the rollback, and check what it leaves: every pod back on the old revision, Ready still
    True, RolloutHealthy False with the message, a Warning Event."""
    cluster = fleet.cluster
    record = await cluster.wait("rolled back", lambda: in_phase(cluster, "RolledBack"), timeout=90)
    await cluster.wait_async("every pod on the old revision", lambda: fleet.all_serve(fleet.old))
    await cluster.wait("Ready again", lambda: condition(cluster, "Ready").get("status") == "True")
    healthy = condition(cluster, "RolloutHealthy")
    assert (healthy["status"], healthy["reason"]) == ("False", "RolledBack") and healthy["message"] == record["message"]
    assert record["stableRevision"] == fleet.old and record["revision"] != fleet.old
    events = [e for e in cluster.all("Event") if e.get("reason") == "RolloutRolledBack"]
    assert events and events[-1]["type"] == "Warning" and record["revision"] in events[-1]["message"]
    return record


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with api_server() as cluster:
        yield cluster


async def test_a_good_edit_reaches_the_canary_first_then_every_pod_without_a_failed_request(
    cluster: Cluster, pods: Pods
) -> None:
    async with running_operator(cluster, **SETTINGS):
        fleet = await start_fleet(cluster, pods)
        with RequestLoop(list(fleet.urls.values())) as loop:
            await cluster.patch(
                "TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": 200}}}}
            )
            baking = await cluster.wait("the canary baking", lambda: in_phase(cluster, "Baking"))
            seen = await fleet.serving()
            [canary] = baking["canaryPods"]
            assert seen == {pod: baking["revision"] if pod == canary else fleet.old for pod in PODS}
            promoted = await cluster.wait(
                "promoted", lambda: in_phase(cluster, "Stable", baking["revision"]), timeout=60
            )
            await cluster.wait_async("every pod on the new revision", lambda: fleet.all_serve(baking["revision"]))
        assert loop.failures == [] and all(loop.answered_by[url] > 0 for url in fleet.urls.values())
        assert promoted["stableRevision"] == baking["revision"] and promoted["previousRevision"] == fleet.old
        assert "promoted after" in promoted["message"] and condition(cluster, "RolloutHealthy")["reason"] == "Promoted"
        for revision in (fleet.old, baking["revision"]):  # both kept for the next rollback
            assert cluster.get("ConfigMap", f"add-revision-{revision}") is not None
        assert_valid_objects(cluster)


async def test_a_model_that_raises_is_rolled_back_from_the_canary_alone(cluster: Cluster, pods: Pods) -> None:
    async with running_operator(cluster, **SETTINGS):
        fleet = await start_fleet(cluster, pods, bakeSeconds=30, probe={"maxRequests": 0})  # Triton's counters alone
        loads = {pod: load_calls(pod) for pod in PODS}
        with RequestLoop(list(fleet.urls.values())) as loop:
            edited = time.monotonic()
            await new_code(cluster, add_code(execute="raise RuntimeError('bad revision')"))
            record = await rolled_back(fleet)
            took = time.monotonic() - edited
        # Failures come from the canary's share only, and stop at the first minRequests of them, long
        # before the 30 s bake would be over.
        [canary] = record["canaryPods"]
        assert set(loop.failed_by) == {fleet.urls[canary]}, "only the canary's clients saw failures"
        assert took < 30, f"rolled back after {took:.1f}s"
        assert f"requests failed on pod {canary}" in record["message"] and "> 1.0%" in record["message"]
        others = [pod for pod in PODS if pod != canary]
        assert {pod: load_calls(pod) for pod in others} == {pod: loads[pod] for pod in others}, (
            "the other pods never loaded the new revision"
        )
        assert await asyncio.to_thread(answers_with, fleet.urls[canary], [2.0] * 4)


async def test_a_revision_five_times_slower_is_rolled_back_by_the_latency_ratio(cluster: Cluster, pods: Pods) -> None:
    async with running_operator(cluster, **SETTINGS):
        fleet = await start_fleet(cluster, pods, code=add_code(execute="time.sleep(0.004)"))
        with RequestLoop(list(fleet.urls.values())) as loop:
            await new_code(cluster, add_code(execute="time.sleep(0.02)"))
            record = await rolled_back(fleet)
        assert "ms per request against" in record["message"] and "x > 2x" in record["message"]
        assert loop.failures == []


async def test_a_bad_file_through_a_configmap_edit_is_rolled_back_to_the_old_file(cluster: Cluster, pods: Pods) -> None:
    async with running_operator(cluster, **SETTINGS):
        fleet = await start_fleet(cluster, pods)
        with RequestLoop(list(fleet.urls.values())):
            await cluster.patch(
                "ConfigMap",
                "add-files",
                {"data": {"model.py": add_code(execute="raise RuntimeError('bad file')").decode()}},
            )
            await rolled_back(fleet)
        # The old file exists only in the kept revision now: the canary runs it again.
        for url in fleet.urls.values():
            assert await asyncio.to_thread(answers_with, url, [2.0] * 4)


async def test_an_operator_restarted_mid_bake_ends_the_rollout_as_written(cluster: Cluster, pods: Pods) -> None:
    async with contextlib.AsyncExitStack() as first_operator:
        await first_operator.enter_async_context(running_operator(cluster, **SETTINGS))
        fleet = await start_fleet(cluster, pods, code=add_code(execute="time.sleep(0.004)"), bakeSeconds=6)
        with RequestLoop(list(fleet.urls.values())):
            await new_code(cluster, add_code(execute="time.sleep(0.02)"))
            baking = await cluster.wait("the canary baking", lambda: in_phase(cluster, "Baking"))
            await first_operator.aclose()  # stopped mid-bake; clients go on
            assert (await fleet.serving())[baking["canaryPods"][0]] == baking["revision"]
            async with running_operator(cluster, **SETTINGS):
                record = await rolled_back(fleet)
    assert record["bakeStartedAt"] == baking["bakeStartedAt"], "the bake resumed from the written state"
    assert "x > 2x" in record["message"]


async def test_a_load_triton_refuses_on_the_canary_leaves_every_pod_on_the_old_revision(
    cluster: Cluster, pods: Pods
) -> None:
    async with running_operator(cluster, **SETTINGS):
        fleet = await start_fleet(cluster, pods)
        loads = {pod: load_calls(pod) for pod in PODS}
        with RequestLoop(list(fleet.urls.values())) as loop:
            await new_code(cluster, add_code(offset=1.0, initialize="raise RuntimeError('cannot start')"))
            record = await rolled_back(fleet)
        [canary] = record["canaryPods"]
        assert f"Triton refused revision {record['revision']} on pod {canary}" in record["message"]
        others = [pod for pod in PODS if pod != canary]
        assert {pod: load_calls(pod) for pod in others} == {pod: loads[pod] for pod in others}
        assert loop.failures == []


async def test_a_pod_that_starts_mid_bake_gets_the_stable_revision_and_the_canary_share_stays(
    cluster: Cluster, pods: Pods
) -> None:
    async with running_operator(cluster, **SETTINGS):
        fleet = await start_fleet(cluster, pods, bakeSeconds=600)
        await cluster.patch(
            "TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": 200}}}}
        )
        baking = await cluster.wait("the canary baking", lambda: in_phase(cluster, "Baking"))
        await cluster.patch("TritonServer", "triton", {"spec": {"replicas": 4}})
        await add_pod(cluster, pods, "triton-3", cluster.control_key("triton") or "")
        await cluster.wait(
            "the new pod in service", lambda: (cluster.pod_condition("triton-3") or {}).get("status") == "True"
        )
        assert await asyncio.to_thread(revision_on, pods.tritons["triton-3"]) == fleet.old
        [canary] = baking["canaryPods"]
        assert (await fleet.serving())[canary] == baking["revision"]
        assert rollout(cluster)["canaryPods"] == [canary] != ["triton-3"] and rollout(cluster)["phase"] == "Baking"


# SUM of 2 elements where the config promises 4.
WRONG_SHAPE = (
    "return [pb_utils.InferenceResponse([pb_utils.Tensor('SUM', "
    "pb_utils.get_input_tensor_by_name(r, 'A').as_numpy()[:, :2])]) for r in requests]"
)


async def test_a_revision_answering_with_error_responses_is_rolled_back_from_the_canary_alone(
    cluster: Cluster, pods: Pods
) -> None:
    async with running_operator(cluster, **SETTINGS):
        fleet = await start_fleet(cluster, pods, bakeSeconds=30)
        loads = {pod: load_calls(pod) for pod in PODS}
        with RequestLoop(list(fleet.urls.values())) as loop:
            edited = time.monotonic()
            await new_code(cluster, add_code(execute=ERROR_RESPONSE))
            record = await rolled_back(fleet)
            took = time.monotonic() - edited
        [canary] = record["canaryPods"]
        assert f"probe requests failed on pod {canary}: 'this revision is broken'" in record["message"], record[
            "message"
        ]
        assert set(loop.failed_by) == {fleet.urls[canary]}, "only the canary's clients saw failures"
        assert took < 30, f"rolled back after {took:.1f}s, before the bake's end"
        others = [pod for pod in PODS if pod != canary]
        assert {pod: load_calls(pod) for pod in others} == {pod: loads[pod] for pod in others}, (
            "the other pods never loaded the new revision"
        )
        print(
            f"rolled back {took:.1f}s after the edit; {loop.failed_by[fleet.urls[canary]]} failed client requests "
            f"on the canary: {record['message']}"
        )


async def test_a_revision_answering_outputs_of_the_wrong_shape_is_rolled_back(cluster: Cluster, pods: Pods) -> None:
    async with running_operator(cluster, **SETTINGS):
        fleet = await start_fleet(cluster, pods, bakeSeconds=30)
        await new_code(cluster, add_code(execute=WRONG_SHAPE))
        record = await rolled_back(fleet)
        assert "output 'SUM' has shape [1, 2], the config promises [1, 4]" in record["message"], record["message"]


@pytest.mark.parametrize(("offset", "outcome"), [(0.5, "RolledBack"), (0.01, "Stable")])
async def test_compare_rolls_back_answers_beyond_the_tolerance_and_promotes_those_within(
    cluster: Cluster, pods: Pods, offset: float, outcome: str
) -> None:
    async with running_operator(cluster, **SETTINGS):
        probe = {"compare": {"tolerance": 0.1}, "requestsPerSecond": 10}
        fleet = await start_fleet(cluster, pods, bakeSeconds=3, probe=probe)
        with RequestLoop(list(fleet.urls.values())) as loop:
            await new_code(cluster, add_code(offset=offset))
            record = (
                await rolled_back(fleet)
                if outcome == "RolledBack"
                else await cluster.wait(
                    "promoted",
                    lambda: in_phase(cluster, "Stable") if rollout(cluster).get("previousRevision") else None,
                    timeout=60,
                )
            )
        if outcome == "RolledBack":
            assert "differs by up to 0.5 (tolerance 0.1) from the stable revision's answer" in record["message"], (
                record["message"]
            )
        else:
            assert "promoted after" in record["message"] and " probe requests, 0 failed" in record["message"], record[
                "message"
            ]
            assert loop.failures == []


# The add model answering on a stream (decoupled): SUM in one response, then the final flag; or an error response
# on the stream.
STREAMED_SUM = (
    "[r.get_response_sender().send(pb_utils.InferenceResponse([pb_utils.Tensor('SUM', "
    "pb_utils.get_input_tensor_by_name(r, 'A').as_numpy() "
    "+ pb_utils.get_input_tensor_by_name(r, 'B').as_numpy())]), "
    "flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL) for r in requests]; return None"
)
STREAMED_ERROR = (
    "[r.get_response_sender().send(pb_utils.InferenceResponse(error=pb_utils.TritonError('this revision is broken')), "
    "flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL) for r in requests]; return None"
)


async def test_a_decoupled_revision_answering_errors_on_the_stream_is_rolled_back(cluster: Cluster, pods: Pods) -> None:
    """Its probes go on a stream: the stable revision passes them on its first loads, the broken one fails them."""
    async with running_operator(cluster, **SETTINGS):
        fleet = await start_fleet(
            cluster,
            pods,
            code=add_code(execute=STREAMED_SUM),
            config=ADD_CONFIG | {"modelTransactionPolicy": {"decoupled": True}},
            bakeSeconds=30,
        )
        await new_code(cluster, add_code(execute=STREAMED_ERROR))
        record = await rolled_back(fleet)
        [canary] = record["canaryPods"]
        assert f"probe requests failed on pod {canary}: 'this revision is broken'" in record["message"], record[
            "message"
        ]
