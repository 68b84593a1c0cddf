"""What a pass plans from what it saw, one row per concern: the children to write, the objects to delete,
the pods' sync with its probes and reads, and nothing to do for a server that cannot run. The plan is
made before anything is executed; executing it is what the other tests of the worker watch."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.k8s.test_kept_renderings import KEY, Cluster
from triton_operator.k8s.process.settings import Settings
from triton_operator.k8s.server.worker import ServerWorker

SYNC = ["sync the pods", "probe the canaries", "read the autoscaler", "read the memory sidecars"]


class Api(Cluster):
    """The test cluster with the API's delete (its own `delete` takes a model from the index)."""

    def __init__(self, models: int) -> None:
        super().__init__(models=models)
        self.deleted: list[str] = []

    async def delete(self, kind: str, namespace: str, name: str) -> None:  # type: ignore[override]
        self.deleted.append(f"{kind}/{name}")


def server_spec(cluster: Cluster) -> dict[str, Any]:
    return copy.deepcopy(cluster.indexes.server(KEY)["spec"])  # type: ignore[index]


def with_server_spec(cluster: Cluster, **fields: Any) -> None:
    cluster.change("TritonServer", "triton", spec={**server_spec(cluster), **fields})


async def autoscaling_dropped(cluster: Cluster, worker: ServerWorker) -> None:
    """The operator made an HPA for the server's autoscaling; then the spec dropped it."""
    before = server_spec(cluster)
    with_server_spec(cluster, autoscaling={"maxReplicas": 4})
    assert await worker.reconcile()
    cluster.change("TritonServer", "triton", spec=before)


async def network_policy_off(cluster: Cluster, worker: ServerWorker) -> None:
    with_server_spec(cluster, networkPolicy={"enabled": False})


async def server_refused(cluster: Cluster, worker: ServerWorker) -> None:
    with_server_spec(cluster, replicas=-1)


async def model_edited(cluster: Cluster, worker: ServerWorker) -> None:
    spec = copy.deepcopy(cluster.model("model-1")["spec"])
    spec["config"]["maxBatchSize"] = 64
    cluster.change("TritonModel", "model-1", spec=spec)


async def nothing(cluster: Cluster, worker: ServerWorker) -> None:
    pass


# (what changed after a first pass that wrote everything, what the next pass plans, in order)
ROWS: list[tuple[str, Callable[[Cluster, ServerWorker], Awaitable[None]], list[str]]] = [
    ("nothing", nothing, SYNC),
    ("a model's config", model_edited, ["apply ConfigMap/model-1-config", *SYNC]),
    (
        "an autoscaler the spec no longer asks for",
        autoscaling_dropped,
        ["delete HorizontalPodAutoscaler/triton", *SYNC],
    ),
    ("the NetworkPolicy turned off", network_policy_off, ["delete NetworkPolicy/triton", *SYNC]),
    ("the server refused", server_refused, []),
]


async def plan_of(worker: ServerWorker) -> list[str]:
    plan = worker.plan_pass(await worker.observe())
    return [str(action) for action in plan.actions]


@pytest.mark.parametrize(("change", "plan"), [(change, plan) for _, change, plan in ROWS], ids=[r[0] for r in ROWS])
async def test_a_pass_plans_from_what_it_saw(
    change: Callable[[Cluster, ServerWorker], Awaitable[None]], plan: list[str]
) -> None:
    cluster = Api(models=2)
    worker = ServerWorker(KEY, cluster.indexes, cluster, Settings())  # type: ignore[arg-type]
    first = await plan_of(worker)
    assert first[0].startswith("apply Deployment/triton, Service/triton") and first[1:] == SYNC
    assert await worker.reconcile()
    await change(cluster, worker)
    assert await plan_of(worker) == plan


async def test_a_delete_done_is_not_planned_again_until_a_resync() -> None:
    cluster = Api(models=1)
    worker = ServerWorker(KEY, cluster.indexes, cluster, Settings())  # type: ignore[arg-type]
    assert await worker.reconcile()
    await network_policy_off(cluster, worker)
    assert await worker.reconcile()
    assert cluster.deleted == ["NetworkPolicy/triton"]
    assert await plan_of(worker) == SYNC
    worker.children.forget()  # the resync: a policy someone made again is deleted again, the children applied again
    assert await plan_of(worker) == ["delete NetworkPolicy/triton", "apply Deployment/triton, Service/triton", *SYNC]


async def test_a_server_without_its_keys_plans_its_children_and_holds_the_sync() -> None:
    cluster = Cluster(models=1)
    worker = ServerWorker(KEY, cluster.indexes, cluster, Settings())  # type: ignore[arg-type]
    seen = await worker.observe()
    plan = worker.plan_pass(type(seen)(**{**seen.__dict__, "keys": None}))
    assert [type(action).__name__ for action in plan.actions] == ["ApplyChildren"]
    assert plan.held == ["sync the pods: their control key is not known yet"]
