"""A model whose load kills its pod's tritonserver, on the emulated API server with a real tritonserver as the
pod and the test as its kubelet (the container restarted, its restartCount and lastState written): after two
deaths the model is held back with a CrashedServer condition, the pod serves the other model again, and a
change of the model's files loads it again."""

from __future__ import annotations

import asyncio
import copy
import signal
from typing import Any

import pytest

from tests.support.models import add_code
from tests.support.operator import Cluster, Pods, api_server, running_operator
from tests.support.resources import FILES, MODEL
from tests.support.serving import infer, serve_add_model

# Killed as its stub's parent, Triton dies mid-load as with a backend crashing in its process. SIGKILL: its
# handler of SIGSEGV prints a stack trace first, and was seen to hang doing so.
KILLS_TRITON = "import os, signal; os.kill(os.getppid(), signal.SIGKILL); time.sleep(60)"


def crash_objects(code: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    files = copy.deepcopy(FILES) | {"metadata": {"name": "crash-files"}, "data": {"model.py": code.decode()}}
    model = copy.deepcopy(MODEL)
    model["metadata"]["name"] = "crash"
    model["spec"]["files"]["configMapRef"]["name"] = "crash-files"
    return files, model


async def kubelet(cluster: Cluster, pods: Pods, name: str, deaths: list[str]) -> None:
    """Restart the pod's tritonserver each time it dies, and write its status as the kubelet would."""
    triton = pods.tritons[name]
    while True:
        while triton.process is not None and triton.process.poll() is None:
            await asyncio.to_thread(triton.wait, 0.5)  # bounded: a thread left waiting would hold the loop's end
        code = triton.process.returncode if triton.process is not None else None
        if code is None or code >= 0:
            return  # stopped by the test, not dead
        deaths.append(signal.Signals(-code).name)
        await asyncio.to_thread(pods.restart, name)
        terminated = {"exitCode": 128 - code, "reason": "Error"}
        status = {"name": "tritonserver", "restartCount": len(deaths), "lastState": {"terminated": terminated}}
        await cluster.patch("Pod", name, {"status": {"containerStatuses": [status]}}, subresource="status")


def condition(cluster: Cluster, model: str, type_: str) -> dict[str, Any]:
    return cluster.condition("TritonModel", model, type_) or {}


@pytest.mark.triton
async def test_a_model_killing_its_server_twice_is_held_back_and_the_others_serve_again(pods: Pods) -> None:
    async with api_server() as cluster, running_operator(cluster, read_timeout_seconds=1.0):
        await serve_add_model(cluster, pods, ("triton-a",))
        url = pods.tritons["triton-a"].grpc_url
        await cluster.wait("add ready", lambda: condition(cluster, "add", "Ready").get("status") == "True")
        deaths: list[str] = []
        restarting = asyncio.create_task(kubelet(cluster, pods, "triton-a", deaths))
        try:
            for obj in crash_objects(add_code(initialize=KILLS_TRITON)):
                await cluster.create(obj)
            crashed = await cluster.wait(
                "CrashedServer", lambda: condition(cluster, "crash", "CrashedServer"), timeout=120
            )
            # Held after two deaths; a load sent again before the second restart's status was written can
            # cost a third on this busy machine (the kubelet's stand-in restarts Triton at once, with no back-off).
            held = len(deaths)
            assert crashed["status"] == "True" and deaths == ["SIGKILL"] * held and held in (2, 3), (crashed, deaths)
            assert f"TritonServer triton's tritonserver died {held} times" in crashed["message"] or (
                "TritonServer triton's tritonserver died 2 times" in crashed["message"]
            ), crashed
            assert "pod triton-a: signal 9 (SIGKILL), exit code 137 (Error)" in crashed["message"]
            assert condition(cluster, "crash", "Ready")["reason"] == "CrashedServer"
            await cluster.wait(
                "add ready again on the restarted pod",
                lambda: (
                    (cluster.pod_condition("triton-a") or {}).get("status") == "True"
                    and condition(cluster, "add", "Ready").get("status") == "True"
                ),
                timeout=60,
            )
            assert await asyncio.to_thread(infer, url) == [2.0] * 4

            await cluster.patch("ConfigMap", "crash-files", {"data": {"model.py": add_code(offset=1.0).decode()}})
            await cluster.wait(
                "crash loaded once its files changed",
                lambda: (
                    condition(cluster, "crash", "Ready").get("status") == "True"
                    and not condition(cluster, "crash", "CrashedServer")
                ),
                timeout=60,
            )
            assert await asyncio.to_thread(infer, url, "crash") == [3.0] * 4
            assert len(deaths) == held  # none once held
        finally:
            restarting.cancel()
