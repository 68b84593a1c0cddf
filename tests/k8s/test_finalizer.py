"""The TritonModel finalizer the operator keeps itself, and what a new model costs the API server: the
operator in-process on the emulated API server, a server without pods."""

from __future__ import annotations

import copy
from collections import Counter

from tests.support.operator import Cluster, api_server, running_operator
from tests.support.resources import FILES, MODEL, SERVER
from triton_operator.k8s.api import ApiError, failure
from triton_operator.k8s.finalizer import FINALIZER

KEY = ("default", "triton")
OTHER = "example.com/keep"  # another controller's finalizer


def with_status(cluster: Cluster, name: str) -> dict | None:
    model = cluster.get("TritonModel", name)
    return model if model and (model.get("status") or {}).get("configHash") else None


def model_writes(cluster: Cluster, since: int) -> Counter[tuple[str, str]]:
    return Counter(
        (call.verb, call.resource)
        for call in cluster.operator_calls()[since:]
        if call.verb in ("create", "update", "patch", "delete") and call.resource.startswith("tritonmodels")
    )


async def test_a_new_model_costs_its_finalizer_and_its_status() -> None:
    async with api_server() as cluster, running_operator(cluster) as operator:
        for obj in (SERVER, FILES):
            await cluster.create(copy.deepcopy(obj))
        await cluster.wait("the server's status", lambda: (cluster.get("TritonServer", "triton") or {}).get("status"))
        before = len(cluster.operator_calls())
        await cluster.create(copy.deepcopy(MODEL))
        model = await cluster.wait("the model's status", lambda: with_status(cluster, "add"))
        await operator.workers.get(KEY).next_pass()  # a pass after the status: nothing is left to write
        assert model_writes(cluster, before) == {("patch", "tritonmodels"): 1, ("patch", "tritonmodels/status"): 1}
        model = cluster.get("TritonModel", "add")
        assert model["metadata"]["finalizers"] == [FINALIZER]
        assert not model["metadata"].get("annotations")  # kopf keeps nothing on it

        await cluster.delete("TritonModel", "add")
        await cluster.wait("the model released (no pod holds it)", lambda: cluster.get("TritonModel", "add") is None)
        # The operator forgets the release at the model's DELETED event, which its watch brings after the object is
        # gone.
        await cluster.wait(
            "the release forgotten",
            lambda: not operator.finalizer.releasing and not operator.finalizer.latest,
            timeout=5,
        )


async def test_another_controllers_finalizer_is_kept() -> None:
    async with api_server() as cluster, running_operator(cluster):
        for obj in (SERVER, FILES):
            await cluster.create(copy.deepcopy(obj))
        model = copy.deepcopy(MODEL)
        model["metadata"]["finalizers"] = [OTHER]
        await cluster.create(model)
        await cluster.wait(
            "both finalizers",
            lambda: (
                (cluster.get("TritonModel", "add") or {}).get("metadata", {}).get("finalizers") == [OTHER, FINALIZER]
            ),
        )
        await cluster.delete("TritonModel", "add")
        await cluster.wait(
            "ours released, the other kept",
            lambda: (cluster.get("TritonModel", "add") or {}).get("metadata", {}).get("finalizers") == [OTHER],
        )
        assert cluster.get("TritonModel", "add")["metadata"].get("deletionTimestamp")


def test_a_failed_request_names_itself_in_the_log_even_when_it_says_nothing() -> None:
    assert failure(TimeoutError()) == "TimeoutError"  # a timed-out write used to log "failed: "
    assert failure(ApiError(409, "conflict")) == "409: conflict"
