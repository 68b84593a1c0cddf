"""A scale-up on the mini cluster. Its new pod enters its Service once its models are loaded there, not
once the operator has written the statuses that say so: its readinessGate is set by the pod's own sync
when its last load ends, while the pass that started those loads may still be writing statuses. And its
models stay Ready while it joins."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.support.faults import Hold
from tests.support.minicluster import MiniCluster, operated_cluster
from tests.support.minicluster.controller import is_ready, is_terminating
from tests.support.models import add_code
from tests.support.resources import FILES, MODEL, SERVER

pytestmark = [pytest.mark.slow, pytest.mark.triton]

# The add model's load takes this long: well past the half second a pod's sync waits for its loads, so
# the new pod's first sync reports the model loading, and its pass goes on to write the server's status.
LOAD_SECONDS = 4


def serving(mini: MiniCluster) -> list[str]:
    return [pod["metadata"]["name"] for pod in mini.pods_of("triton") if is_ready(pod) and not is_terminating(pod)]


def one_pod_serving_the_model(mini: MiniCluster) -> bool:
    """One pod, Ready, and the model's status says it is ready there: no status naming a load is due."""
    status = (mini.cluster.get("TritonModel", "add") or {}).get("status") or {}
    return len(mini.pods_of("triton")) == 1 == len(serving(mini)) and [
        state["state"] for state in status.get("replicaStates", [])
    ] == ["READY"]


def slow_loading_fleet() -> list[dict[str, Any]]:
    """One server of one pod and the add model, whose load takes LOAD_SECONDS."""
    server: dict[str, Any] = copy.deepcopy(SERVER)
    server["spec"].update(replicas=1, exitTimeoutSeconds=2, drain={"preStopSeconds": 0})
    files: dict[str, Any] = copy.deepcopy(FILES)
    files["data"]["model.py"] = add_code(initialize=f"time.sleep({LOAD_SECONDS})").decode()
    return [server, files, copy.deepcopy(MODEL)]


async def test_a_new_pod_enters_service_while_the_model_statuses_are_still_being_written(tmp_path: Path) -> None:
    async with operated_cluster(tmp_path) as mini:
        for obj in slow_loading_fleet():
            await mini.cluster.create(obj)
        await mini.cluster.wait("one pod serving the model", lambda: one_pod_serving_the_model(mini), timeout=180)
        first = serving(mini)
        # The server's status naming the new pod as joining stays unanswered: the pass writing it never ends.
        hold = Hold("PATCH", r"/tritonservers/triton/status$", body='"reason": "PodsNotReady"')
        mini.cluster.server.holds.append(hold)
        try:
            await mini.cluster.scale("TritonServer", "triton", 2)
            new = await mini.cluster.wait(
                "the new pod",
                lambda: [
                    name for name in (pod["metadata"]["name"] for pod in mini.pods_of("triton")) if name not in first
                ],
            )
            gate = lambda: (mini.cluster.pod_condition(new[0]) or {}).get("status")  # noqa: E731
            await mini.cluster.wait(
                "the new pod's gate True", lambda: gate() == "True", timeout=30
            )  # the operator gives up a request at 60 s
            assert hold.held == 1  # the pass that wrote the joining pod waits yet: no pass set the gate
            await mini.cluster.wait("the new pod Ready", lambda: new[0] in serving(mini))
        finally:
            hold.released.set()


async def test_a_model_stays_ready_while_a_new_pod_joins(tmp_path: Path) -> None:
    """A scale-up adds a pod, not a change to the model: its status counts the new pod once it has joined,
    and its Ready (what a GitOps tool reads as its health) never turns False meanwhile."""
    async with operated_cluster(tmp_path) as mini:
        for obj in slow_loading_fleet():
            await mini.cluster.create(obj)
        await mini.cluster.wait("one pod serving the model", lambda: one_pod_serving_the_model(mini), timeout=180)
        ready_since = (mini.cluster.condition("TritonModel", "add", "Ready") or {}).get("lastTransitionTime")
        await mini.cluster.scale("TritonServer", "triton", 2)
        await mini.cluster.wait(
            "the model's status counting the new pod",
            lambda: ((mini.cluster.get("TritonModel", "add") or {}).get("status") or {}).get("replicas") == "2/2",
            timeout=120,
        )
        ready = mini.cluster.condition("TritonModel", "add", "Ready") or {}
        assert (ready.get("status"), ready.get("lastTransitionTime")) == ("True", ready_since)
