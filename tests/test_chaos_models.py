"""The chaos suite, models that go wrong: a bad new model and a model whose stub dies, on the emulated
API server with two real tritonservers as pods and a client loop on each pod. What the bad model does
is its own failure; the pods keep serving every other model, with no failed request.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.models import add_code
from tests.support.operator import Cluster, Pods, api_server, running_operator
from tests.support.resources import MODEL
from tests.support.serving import RequestLoop, serve_add_model
from triton_operator.k8s import metrics

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
    files = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-files"}, "data": {"model.py": code.decode()}}
    model = copy.deepcopy(MODEL)
    model["metadata"]["name"] = name
    model["spec"]["files"]["configMapRef"]["name"] = f"{name}-files"
    return [files, model]


def models_failed() -> float:
    return next(
        (s.value for f in metrics.REGISTRY.collect() if f.name == "triton_operator_models" for s in f.samples if s.labels == {"namespace": "default", "server": "triton", "state": "Failed"}),
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
                    lambda: (c := cluster.condition("TritonModel", "broken", "Loaded")) and c["reason"] == "LoadFailed" and c["message"].count("broken on purpose") == 2 and c,
                    timeout=60,
                )
                await cluster.wait(
                    "a LoadFailed Warning Event on the model",
                    lambda: any(e["reason"] == "LoadFailed" and e["involvedObject"]["name"] == "broken" for e in cluster.all("Event")),
                    timeout=30,
                )
        assert "pod triton-a" in failed["message"] and "pod triton-b" in failed["message"]
        assert all(state == ["True", "True"] for state in seen), [state for state in seen if state != ["True", "True"]][:3]
        assert loop.failures == [] and min(loop.answered_by.values()) > 0
        assert models_failed() == 1
        assert (cluster.condition("TritonModel", "add", "Ready") or {}).get("status") == "True"
