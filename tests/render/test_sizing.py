"""A pod's memory derived from the models its server holds, the user's where set, and never a capacity."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.utils.quantity import parse_quantity

from tests.support.resources import BASE_CONFIG, model_document
from triton_operator.api.parse import parse_resources
from triton_operator.api.types import GiB, MiB
from triton_operator.render.deployment import MODELS_MEMORY_ANNOTATION, SHM_BYTES_ANNOTATION
from triton_operator.render.fleet import RenderedServer, plan_fleet, server_objects
from triton_operator.render.placement import DEFAULT_MODEL_BYTES, TRITON_BASELINE_BYTES, server_capacity
from triton_operator.render.schema import check_manifests

SERVER_DOC = {
    "apiVersion": "triton-operator.io/v1alpha1",
    "kind": "TritonServer",
    "metadata": {"name": "triton", "namespace": "ml"},
}


def _server(**spec: Any) -> dict[str, Any]:
    return {**SERVER_DOC, "spec": spec}


FILES = {"configMapRef": {"name": "files", "items": [{"key": "model.onnx", "path": "1/model.onnx"}]}}
CONFIG_MAPS = {("ml", "files"): {"data": {"model.onnx": "onnx"}}}


def _model(name: str, cpu: str | None = None) -> dict[str, Any]:
    document = model_document(BASE_CONFIG, files=FILES, **({"memory": {"cpu": cpu}} if cpu else {}))
    document["metadata"] = {"name": name, "namespace": "ml"}
    return document


def _rendered(server: dict[str, Any], *models: dict[str, Any]) -> RenderedServer:
    servers, parsed, found = parse_resources([server, *models])
    assert found == []
    fleet = plan_fleet(servers, parsed, CONFIG_MAPS)
    [rendered] = fleet.servers
    assert fleet.errors == [] and len(rendered.models) == len(models)
    return rendered


def _memory(deployment: dict[str, Any]) -> tuple[int | None, int | None]:
    """The Triton container's memory request and limit, /dev/shm taken off."""
    resources = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
    shm = int(deployment["metadata"]["annotations"][SHM_BYTES_ANNOTATION])
    request, limit = resources.get("requests", {}).get("memory"), resources.get("limits", {}).get("memory")
    return (
        None if request is None else int(parse_quantity(request)) - shm,
        None if limit is None else int(parse_quantity(limit)) - shm,
    )


def _deployment(rendered: RenderedServer, deployed: dict[str, Any] | None = None) -> dict[str, Any]:
    [deployment] = [obj for obj in server_objects(rendered, None, deployed) if obj["kind"] == "Deployment"]
    return deployment


BASE = TRITON_BASELINE_BYTES


@pytest.mark.parametrize(
    ("server", "models", "requested", "limited"),
    [
        # Nothing set: Triton's baseline and what each model declares, request and limit alike.
        ({}, [], BASE, BASE),
        ({}, [("a", "1Gi"), ("b", "512Mi")], BASE + GiB + 512 * MiB, BASE + GiB + 512 * MiB),
        # A model that declares nothing counts its default in the request, and lifts the limit: a guess caps nothing.
        ({}, [("a", "1Gi"), ("b", None)], BASE + GiB + DEFAULT_MODEL_BYTES, None),
        # A pod with GPUs holds CUDA's host memory, which the baseline does not count: no derived limit.
        ({"gpus": {"count": 1}}, [("a", "1Gi")], BASE + GiB, None),
        # Another resource set leaves the memory derived.
        ({"resources": {"requests": {"cpu": "2"}}}, [("a", "1Gi")], BASE + GiB, BASE + GiB),
        # The user's memory wins, either one: the operator adds /dev/shm to what is set and derives nothing.
        ({"resources": {"requests": {"memory": "4Gi"}}}, [("a", "1Gi")], 4 * GiB, None),
        ({"resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "8Gi"}}}, [("a", "1Gi")], GiB, 8 * GiB),
        ({"resources": {"limits": {"memory": "8Gi"}}}, [("a", "1Gi")], 0, 8 * GiB),
    ],
    ids=["empty", "declared", "a-default", "gpus", "cpu-only", "user-request", "user-both", "user-limit"],
)
def test_pod_memory_comes_from_the_models_unless_the_user_sets_it(
    server: dict[str, Any], models: list[tuple[str, str | None]], requested: int, limited: int | None
) -> None:
    rendered = _rendered(_server(**server), *(_model(name, cpu) for name, cpu in models))
    deployment = _deployment(rendered)
    assert _memory(deployment) == (requested, limited)
    assert check_manifests([deployment]) == []


@pytest.mark.parametrize(
    ("server", "capacity"),
    [
        # Sized from its models: its capacity stays unknown, the derived limit is not a capacity.
        ({}, None),
        ({"resources": {"limits": {"memory": "8Gi"}}}, 8 * GiB - BASE),
        ({"capacity": {"memory": "2Gi"}}, 2 * GiB),
    ],
    ids=["derived", "user-limit", "capacity"],
)
def test_capacity_comes_from_the_spec_never_from_a_derived_limit(server: dict[str, Any], capacity: int | None) -> None:
    rendered = _rendered(_server(**server), _model("a", "1Gi"), _model("b", "3Gi"))
    assert server_capacity(rendered.server.spec) == (capacity, None)
    if capacity is None:
        assert _memory(_deployment(rendered))[1] == BASE + 4 * GiB  # while the pod has a limit


def test_derived_memory_grows_with_the_models_but_does_not_shrink_by_itself() -> None:
    """A removed model alone never rolls the pods for less memory; the next roll for another reason takes it."""
    models = [_model("a", "1Gi"), _model("b", "2Gi")]
    one = _deployment(_rendered(_server(), models[0]))
    two = _deployment(_rendered(_server(), *models), one)
    assert _memory(two) == (BASE + 3 * GiB, BASE + 3 * GiB)  # grows: the pods roll for it
    assert _deployment(_rendered(_server(), models[0]), two) == two  # same template: nothing to apply
    rolled = _deployment(_rendered(_server(extraArgs=["--exit-on-error=true"]), models[0]), two)
    assert _memory(rolled) == (BASE + GiB, BASE + GiB)  # rolling anyway: smaller
    assert rolled["metadata"]["annotations"][MODELS_MEMORY_ANNOTATION] == str(GiB)
