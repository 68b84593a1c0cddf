"""The chaos suite, what already held and must keep holding, each with its bound: an operator stopped
mid-reload and a new one started; a pod replaced at a new address; twenty edits 50 ms apart; a files
ConfigMap deleted while serving. On the emulated API server with real tritonservers as pods."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from tests.support.models import add_code
from tests.support.operator import Cluster, Pods, api_server, running_operator
from tests.support.serving import RequestLoop, add_pod, answers_with, model_ready_at, serve_add_model

pytestmark = pytest.mark.triton

SLOW_LOAD = "import time; time.sleep(4)"  # initialize() of a model whose load takes a while


async def serving(cluster: Cluster, pods: Pods) -> None:
    """The add model ready on two pods."""
    await serve_add_model(cluster, pods, ("triton-a", "triton-b"))
    await cluster.wait("ready on every pod", lambda: model_ready_at(cluster))


async def all_answer(urls: list[str], expected: list[float]) -> bool:
    return all(await asyncio.gather(*(asyncio.to_thread(answers_with, url, expected) for url in urls)))


async def test_an_operator_stopped_mid_reload_and_a_new_one_converge_with_no_failed_request(pods: Pods) -> None:
    async with api_server() as cluster:
        with contextlib.ExitStack() as clients:
            async with running_operator(cluster):
                await serving(cluster, pods)
                urls = [triton.grpc_url for triton in pods.tritons.values()]
                loop = clients.enter_context(RequestLoop(urls))
                await cluster.patch(
                    "ConfigMap",
                    "add-files",
                    {"data": {"model.py": add_code(offset=1.0, initialize=SLOW_LOAD).decode()}},
                )
                await asyncio.sleep(0.5)  # the reloads (four seconds each) are under way when the operator stops
            assert await all_answer(urls, [2.0] * 4)  # stopped mid-reload: the old code still serves
            started = time.monotonic()
            async with running_operator(cluster):
                await cluster.wait_async("the new code on every pod", lambda: all_answer(urls, [3.0] * 4), timeout=60)
                await cluster.wait("ready on every pod", lambda: model_ready_at(cluster))
            converged = time.monotonic() - started
    assert loop.failures == [] and loop.sent > 0
    assert converged <= 20, converged


async def test_a_pod_replaced_at_a_new_address_is_refilled(pods: Pods) -> None:
    async with api_server() as cluster, running_operator(cluster):
        await serving(cluster, pods)
        await cluster.delete("Pod", "triton-b")
        replaced = time.monotonic()
        await add_pod(cluster, pods, "triton-c", cluster.control_key("triton"))
        await cluster.wait(
            "the new pod in service",
            lambda: (cluster.pod_condition("triton-c") or {}).get("status") == "True",
            timeout=30,
        )
        assert time.monotonic() - replaced <= 5
        assert answers_with(pods.tritons["triton-c"].grpc_url, [2.0] * 4)
        await cluster.wait("ready on the pods there are", lambda: model_ready_at(cluster))


async def test_twenty_edits_50_ms_apart_converge_to_the_last(pods: Pods) -> None:
    async with api_server() as cluster, running_operator(cluster):
        await serving(cluster, pods)
        for delay in range(1000, 1020):
            await cluster.patch(
                "TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": delay}}}}
            )
            await asyncio.sleep(0.05)
        last_edit = time.monotonic()
        generation = cluster.get("TritonModel", "add")["metadata"]["generation"]

        def converged() -> bool:
            status = model_ready_at(cluster) or {}
            return status.get("observedGeneration") == generation and {
                s["revision"] for s in status["replicaStates"]
            } == {status["configHash"]}

        await cluster.wait("the last edit on every pod", converged, timeout=60)
        assert time.monotonic() - last_edit <= 10
        config = cluster.get("ConfigMap", "add-config")["data"]["config.pbtxt"]
        assert "max_queue_delay_microseconds: 1019" in config


async def test_a_files_config_map_deleted_while_serving_keeps_the_model_serving(pods: Pods) -> None:
    async with api_server() as cluster, running_operator(cluster, resync_seconds=1) as operator:
        await serving(cluster, pods)
        urls = [triton.grpc_url for triton in pods.tritons.values()]
        with RequestLoop(urls) as loop:
            await cluster.delete("ConfigMap", "add-files")
            refused = await cluster.wait(
                "FilesMissing",
                lambda: (c := cluster.condition("TritonModel", "add", "ConfigValid")) and c["status"] == "False" and c,
            )
            assert refused["reason"] == "FilesMissing"
            worker = operator.workers.get(("default", "triton"))
            for _ in range(3):  # passes after the refusal, resyncs among them
                await worker.next_pass()
        assert loop.failures == [] and loop.sent > 0
        assert all((cluster.pod_condition(name) or {}).get("status") == "True" for name in pods.tritons)
        assert await all_answer(urls, [2.0] * 4)
