"""A model's first load judged by the probe before it counts ready on a pod (spec.rollout.probe.onFirstLoad,
on by default under Canary), on the emulated API server with real tritonservers as pods: a new model that
loads but answers every request with an error response never counts ready, and its status says why; a good
one does; neither takes a pod out of service or keeps a new pod out.
"""

from __future__ import annotations

import pytest

from tests.scenarios.test_chaos_models import gates, gates_watched
from tests.support.models import ADD_CONFIG, ERROR_RESPONSE, add_code
from tests.support.operator import Cluster, Pods, api_server, running_operator
from tests.support.resources import python_model_documents
from tests.support.serving import add_pod, serve_add_model

pytestmark = pytest.mark.triton

PODS = ("triton-a", "triton-b")
BROKEN = "this revision is broken"


def a_canary_model(name: str, code: bytes) -> list[dict[str, object]]:
    """A model like add with code of its own and the Canary strategy (its first loads probed by default)."""
    files, model = python_model_documents(name, ADD_CONFIG, code)
    model["spec"]["rollout"] = {"strategy": "Canary"}
    return [files, model]


def loaded(cluster: Cluster, name: str) -> dict[str, object]:
    return cluster.condition("TritonModel", name, "Loaded") or {}


def good_ready(cluster: Cluster, replicas: str) -> bool:
    status = (cluster.get("TritonModel", "good") or {}).get("status") or {}
    return (
        status.get("replicas") == replicas
        and (cluster.condition("TritonModel", "good", "Ready") or {}).get("status") == "True"
    )


def failed_probes(cluster: Cluster, pods: int) -> dict[str, object] | None:
    condition = loaded(cluster, "broken")
    return (
        condition
        if condition.get("reason") == "ProbeFailed" and str(condition.get("message")).count(BROKEN) == pods
        else None
    )


async def test_a_new_model_answering_error_responses_never_counts_ready_and_a_good_one_does(pods: Pods) -> None:
    async with api_server() as cluster, running_operator(cluster):
        key = await serve_add_model(cluster, pods, PODS)
        await cluster.wait("both pods in service", lambda: gates(cluster) == ["True", "True"], timeout=60)
        async with gates_watched(cluster) as seen:
            for obj in [
                *a_canary_model("broken", add_code(execute=ERROR_RESPONSE)),
                *a_canary_model("good", add_code()),
            ]:
                await cluster.create(obj)
            await cluster.wait("good ready on both pods", lambda: good_ready(cluster, "2/2"), timeout=60)
            failed = await cluster.wait(
                "broken's first probes failed on both pods", lambda: failed_probes(cluster, 2), timeout=60
            )
        assert all(state == ["True", "True"] for state in seen), (
            "a pod in service left it for a new model's failed probe"
        )
        status = (cluster.get("TritonModel", "broken") or {})["status"]
        assert status["replicas"] == "0/2" and {s["state"] for s in status["replicaStates"]} == {"UNAVAILABLE"}
        assert f"first probe request failed: '{BROKEN}'" in str(failed["message"]) and "pod triton-a" in str(
            failed["message"]
        )
        assert (cluster.condition("TritonModel", "broken", "Ready") or {}).get("reason") == "ProbeFailed"

        # a new pod: broken serves on no pod, so it never keeps the pod out of service; it fails its probe there too
        await add_pod(cluster, pods, "triton-c", key)
        await cluster.wait(
            "the new pod in service",
            lambda: (cluster.pod_condition("triton-c") or {}).get("status") == "True",
            timeout=60,
        )
        await cluster.wait("broken's probe failed on the new pod too", lambda: failed_probes(cluster, 3), timeout=60)
        await cluster.wait("good ready on the 3 pods", lambda: good_ready(cluster, "3/3"), timeout=60)
