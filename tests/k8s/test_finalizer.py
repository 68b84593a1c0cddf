"""The TritonModel finalizer the operator keeps itself, and what a new model costs the API server: the
operator in-process on the emulated API server, a server without pods."""

from __future__ import annotations

import copy
import time
from collections import Counter
from typing import Any

import pytest

from tests.support.operator import Cluster, api_server, running_operator
from tests.support.resources import FILES, MODEL, SERVER
from triton_operator.k8s.api import ApiError, failure
from triton_operator.k8s.watch.finalizer import FINALIZER, Finalizer
from triton_operator.k8s.watch.indexes import model_server_keys

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


RELEASE_TIMEOUT = 2.0
SELECTED = {"serverSelector": {"matchLabels": {"pool": "a"}}, "config": MODEL["spec"]["config"]}


def broken_model(spec: dict[str, Any]) -> dict[str, Any]:
    """A model as an older operator, or a hand, left it: our finalizer on it, its spec as given."""
    return {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonModel",
        "metadata": {"name": "broken", "finalizers": [FINALIZER]},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("spec", "status"),
    [
        pytest.param(MODEL["spec"], {"modelName": ["add", "other"], "conditions": "Ready"}, id="a malformed status"),
        pytest.param(SELECTED, {"placement": {"server": ["triton"], "movedAt": 5}}, id="a malformed placement"),
        pytest.param(SELECTED, {"placement": ["triton"]}, id="a list for the placement"),
        pytest.param({"serverRef": "triton", "files": "add-files", "config": "add"}, {}, id="an old spec shape"),
        pytest.param(["triton"], {}, id="a list for the spec"),
    ],
)
async def test_a_deleted_model_that_does_not_read_loses_its_finalizer_within_the_timeout(
    spec: Any, status: dict[str, Any]
) -> None:
    """Deleted while the operator was away; it starts on a model whose spec or status is not what it reads."""
    async with api_server() as cluster:
        for obj in (SERVER, FILES):
            await cluster.create(copy.deepcopy(obj))
        await cluster.create(broken_model(copy.deepcopy(spec)))
        if status:
            await cluster.patch("TritonModel", "broken", {"status": status}, subresource="status")
        await cluster.delete("TritonModel", "broken")
        assert cluster.get("TritonModel", "broken")["metadata"]["deletionTimestamp"]
        async with running_operator(cluster, finalizer_timeout_seconds=RELEASE_TIMEOUT):
            await cluster.wait(
                "the model released", lambda: cluster.get("TritonModel", "broken") is None, timeout=RELEASE_TIMEOUT + 10
            )


async def test_a_release_that_keeps_failing_ends_at_the_timeout_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever fails in the release (here every look at the pods) is tried again until the finalizer timeout,
    which then takes the finalizer away with a Warning Event naming the failure."""
    looked = 0

    async def failing(*_: Any) -> list[str]:
        nonlocal looked
        looked += 1
        raise RuntimeError("the pods could not be listed")

    monkeypatch.setattr(Finalizer, "_holding", failing)
    async with api_server() as cluster, running_operator(cluster, finalizer_timeout_seconds=RELEASE_TIMEOUT):
        for obj in (SERVER, FILES, MODEL):
            await cluster.create(copy.deepcopy(obj))
        await cluster.wait("the model's status", lambda: with_status(cluster, "add"))
        await cluster.delete("TritonModel", "add")
        deleted = time.monotonic()
        await cluster.wait("the model released", lambda: cluster.get("TritonModel", "add") is None, timeout=15)
        assert time.monotonic() - deleted >= RELEASE_TIMEOUT and looked > 1
        (event,) = await cluster.wait(
            "the Event", lambda: [e for e in cluster.all("Event") if e["reason"] == "UnloadTimedOut"], timeout=5
        )
        assert event["type"] == "Warning" and "the pods could not be listed" in event["message"]


def test_a_placement_that_does_not_validate_keeps_the_servers_it_names_as_strings() -> None:
    placed = broken_model(SELECTED) | {"status": {"placement": {"server": "a", "target": ["b"], "movedAt": 5}}}
    placed["metadata"]["namespace"] = "ml"
    assert model_server_keys(placed) == [("ml", "a")]
