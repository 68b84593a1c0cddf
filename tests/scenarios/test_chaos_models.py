"""The chaos suite, models that go wrong: a bad new model and a model whose stub dies, on the emulated
API server with two real tritonservers as pods and a client loop on each pod. What the bad model does
is its own failure; the pods keep serving every other model, with no failed request.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.support.models import ADD_CONFIG, CRASHY_CODE, add_code
from tests.support.operator import Cluster, Pods, api_server, running_operator
from tests.support.resources import python_model_documents
from tests.support.serving import RequestLoop, infer, revision_on, serve_add_model
from triton_operator.k8s.process import metrics

PODS = ("triton-a", "triton-b")


def gates(cluster: Cluster) -> list[str | None]:
    return [(cluster.pod_condition(name) or {}).get("status") for name in PODS]


@contextlib.asynccontextmanager
async def gates_watched(cluster: Cluster) -> AsyncIterator[list[list[str | None]]]:
    """The pods' gates as read every 0.1 s while the block runs: a gate the operator turned False shows
    there (a pass writes it and only a later pass could turn it back)."""
    seen: list[list[str | None]] = []

    async def watch() -> None:
        while True:
            seen.append(gates(cluster))
            await asyncio.sleep(0.1)

    task = asyncio.get_running_loop().create_task(watch())
    try:
        yield seen
    finally:
        task.cancel()
        seen.append(gates(cluster))


def a_model(name: str, code: bytes) -> list[dict[str, Any]]:
    """A TritonModel like add (same config) with code of its own, and its ConfigMap."""
    return python_model_documents(name, ADD_CONFIG, code)


def models_failed() -> float:
    return next(
        (
            s.value
            for f in metrics.REGISTRY.collect()
            if f.name == "triton_operator_models"
            for s in f.samples
            if s.labels == {"namespace": "default", "server": "triton", "state": "Failed"}
        ),
        0.0,
    )


@pytest.mark.triton
async def test_a_new_model_that_fails_to_load_leaves_every_pod_in_service(pods: Pods) -> None:
    async with api_server() as cluster, running_operator(cluster):
        await serve_add_model(cluster, pods, PODS)
        await cluster.wait("both pods in service", lambda: gates(cluster) == ["True", "True"], timeout=60)
        with RequestLoop([pods.tritons[name].grpc_url for name in PODS]) as loop:
            async with gates_watched(cluster) as seen:
                for obj in a_model("broken", add_code(initialize="raise RuntimeError('broken on purpose')")):
                    await cluster.create(obj)
                failed = await cluster.wait(
                    "the load failure in the model's status",
                    lambda: (
                        (c := cluster.condition("TritonModel", "broken", "Loaded"))
                        and c["reason"] == "LoadFailed"
                        and c["message"].count("broken on purpose") == 2
                        and c
                    ),
                    timeout=60,
                )
                await cluster.wait(
                    "a LoadFailed Warning Event on the model",
                    lambda: any(
                        e["reason"] == "LoadFailed" and e["involvedObject"]["name"] == "broken"
                        for e in cluster.all("Event")
                    ),
                    timeout=30,
                )
        assert "pod triton-a" in failed["message"] and "pod triton-b" in failed["message"]
        assert all(state == ["True", "True"] for state in seen), [state for state in seen if state != ["True", "True"]][
            :3
        ]
        assert loop.failures == [] and min(loop.answered_by.values()) > 0
        assert models_failed() == 1
        assert (cluster.condition("TritonModel", "add", "Ready") or {}).get("status") == "True"


def crash(url: str) -> str:
    """The request that ends the crashy model's stub; Triton's answer to it."""
    client = grpcclient.InferenceServerClient(url)
    try:
        inputs = [grpcclient.InferInput("A", [1, 4], "FP32"), grpcclient.InferInput("B", [1, 4], "FP32")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.full((1, 4), -1, np.float32))
        client.infer("crashy", inputs)
        return "answered"
    except Exception as error:
        return str(error)
    finally:
        client.close()


def answers(url: str, name: str) -> bool:
    try:
        return infer(url, name) == [2.0] * 4
    except Exception:
        return False


def heals(pod: str) -> float:
    return sum(
        s.value
        for f in metrics.REGISTRY.collect()
        if f.name == "triton_operator_control_calls"
        for s in f.samples
        if s.name.endswith("_total")
        and s.labels["action"] == "heal"
        and s.labels["pod"] == pod
        and s.labels["outcome"] == "ok"
    )


@pytest.mark.triton
async def test_a_model_whose_stub_crashed_is_reloaded_on_its_pod_and_serves_again_within_30s(pods: Pods) -> None:
    async with (
        api_server() as cluster,
        running_operator(cluster),
    ):  # the default settings: passes every 60 s, health checks every 10 s
        await serve_add_model(cluster, pods, PODS)
        for obj in a_model("crashy", CRASHY_CODE):
            await cluster.create(obj)
        await cluster.wait(
            "crashy ready on both pods",
            lambda: ((cluster.get("TritonModel", "crashy") or {}).get("status") or {}).get("replicas") == "2/2",
            timeout=60,
        )
        crashed_on, other = pods.tritons["triton-a"].grpc_url, pods.tritons["triton-b"].grpc_url
        with RequestLoop([pods.tritons[name].grpc_url for name in PODS]) as loop:
            assert crash(crashed_on) != "answered"
            crashed = time.monotonic()
            assert not await asyncio.to_thread(answers, crashed_on, "crashy")  # Triton still says ready, and fails it
            await cluster.wait_async(
                "crashy answering on triton-a again",
                lambda: asyncio.to_thread(answers, crashed_on, "crashy"),
                timeout=60,
            )
            served_again = time.monotonic() - crashed
        assert served_again < 30, f"served again {served_again:.1f}s after the crash"
        assert loop.failures == [] and min(loop.answered_by.values()) > 0  # the add model never failed
        assert await asyncio.to_thread(answers, other, "crashy")
        assert heals("triton-a") == 1 and heals("triton-b") == 0

        def said() -> dict[str, Any] | None:
            states = ((cluster.get("TritonModel", "crashy") or {}).get("status") or {}).get("replicaStates", [])
            return next(
                (s for s in states if s["pod"] == "triton-a" and "failed in a row" in s.get("reason", "")), None
            )

        state = await cluster.wait("the status says which pod and why", said, timeout=30)
        assert state["state"] == "READY" and "reloaded (1 times" in state["reason"]
        await cluster.wait(
            "a FailingEveryRequest Warning Event",
            lambda: any(
                e["reason"] == "FailingEveryRequest" and "pod triton-a" in e["message"] for e in cluster.all("Event")
            ),
            timeout=30,
        )


# A load cut by the gRPC connection age every 12 s or so: what a server whose drain.maxRequestSeconds is short does
# to loads.
SHORT_CONNECTIONS = {
    "grpc": {"maxConnectionAgeMs": 10_000, "maxConnectionAgeGraceMs": 2_000},
    "drain": {"maxRequestSeconds": 2},
}
SLOW_LOAD_SECONDS = 60
EDIT_BOUND = 2.0


@pytest.mark.triton
async def test_a_60s_load_succeeds_while_other_models_edits_land_within_2s(pods: Pods) -> None:
    async with api_server() as cluster, running_operator(cluster):
        await serve_add_model(cluster, pods, PODS, **SHORT_CONNECTIONS)
        await cluster.wait("both pods in service", lambda: gates(cluster) == ["True", "True"], timeout=60)
        urls = [pods.tritons[name].grpc_url for name in PODS]
        with RequestLoop(urls) as loop:
            async with gates_watched(cluster) as seen:
                for obj in a_model("slow", add_code(initialize=f"time.sleep({SLOW_LOAD_SECONDS})")):
                    await cluster.create(obj)
                await cluster.wait(
                    "the slow load under way", lambda: "slow" in pods.tritons["triton-a"].log_tail(20_000), timeout=30
                )
                edits = []
                for delay_us in (200, 300, 400):
                    before = await asyncio.to_thread(revision_on, pods.tritons["triton-a"])
                    started = time.monotonic()
                    await cluster.patch(
                        "TritonModel",
                        "add",
                        {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": delay_us}}}},
                    )
                    await cluster.wait_async(
                        "the edit on both pods",
                        lambda: asyncio.to_thread(
                            lambda: all(revision_on(pods.tritons[name]) not in ("", before) for name in PODS)
                        ),
                        timeout=30,
                    )
                    edits.append(time.monotonic() - started)
                await cluster.wait(
                    "slow loaded on both pods",
                    lambda: (cluster.condition("TritonModel", "slow", "Loaded") or {}).get("status") == "True",
                    timeout=3 * SLOW_LOAD_SECONDS,
                )
        assert max(edits) < EDIT_BOUND, edits
        assert loop.failures == [] and min(loop.answered_by.values()) > 0
        assert all(state == ["True", "True"] for state in seen)  # a model loading for the first time takes no pod out
        for name in PODS:
            log = pods.tritons[name].log_tail(200_000)
            assert log.count("loading: slow:1") == 1, f"{name} loaded slow {log.count('loading: slow:1')} times"
        assert await asyncio.to_thread(answers, urls[0], "slow") and await asyncio.to_thread(answers, urls[1], "slow")
