"""A pod is the server's, and is sent the control key, only where its owner chain leads to the server:
Pod -> ReplicaSet -> Deployment -> TritonServer, each link a controller ownerReference. Someone's own pod
with the server's labels copied (to have the key sent to it) gets no call. On the emulated API server,
every pod's Triton a stand-in recording the calls it gets."""

from __future__ import annotations

import copy
from typing import Any

from tests.support.control_recorder import ControlRecorder
from tests.support.operator import Cluster, api_server, owner_reference, running_at, running_operator
from tests.support.resources import FILES, MODEL, SERVER

KEY = ("default", "triton")


async def own(cluster: Cluster, kind: str, name: str, template: dict[str, Any], owner: dict[str, Any] | None) -> Any:
    """A Deployment or ReplicaSet of someone's, labelled as the operator's (its controller `owner`, if any)."""
    meta: dict[str, Any] = {"name": name, "labels": template["metadata"]["labels"]}
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner)]
    spec = {"replicas": 0, "selector": {"matchLabels": template["metadata"]["labels"]}, "template": template}
    return await cluster.create({"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec})


async def look_alike(cluster: Cluster, name: str, template: Any, owner: dict[str, Any] | None, port: int) -> None:
    """A pod with the server's labels and a Triton's gRPC port, running on this machine."""
    meta: dict[str, Any] = {"name": name, "labels": template["metadata"]["labels"]}
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner)]
    container = {"name": "tritonserver", "image": "mine", "ports": [{"name": "grpc", "containerPort": port}]}
    spec = {"containers": [container], "readinessGates": template["spec"]["readinessGates"]}
    await cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    await cluster.patch("Pod", name, running_at("127.0.0.1"), subresource="status")


async def test_a_pod_with_the_servers_labels_but_not_its_owner_chain_gets_no_control_call() -> None:
    async with (
        api_server() as cluster,
        running_operator(cluster) as operator,
        ControlRecorder() as genuine,
        ControlRecorder() as harvester,
    ):
        for obj in (SERVER, FILES, MODEL):
            await cluster.create(copy.deepcopy(obj))
        deployment = await cluster.wait("the Deployment", lambda: cluster.get("Deployment", "triton"))
        template = copy.deepcopy(deployment["spec"]["template"])
        stray = await own(cluster, "ReplicaSet", "triton-stray", template, owner=None)
        their_deployment = await own(cluster, "Deployment", "triton-theirs", template, owner=None)
        theirs = await own(cluster, "ReplicaSet", "triton-theirs-1", template, owner=their_deployment)
        for name, owner in [("labels-only", None), ("stray-replicaset", stray), ("their-deployment", theirs)]:
            await look_alike(cluster, name, template, owner, harvester.port)

        await cluster.add_pod("triton", "triton-a", "127.0.0.1", genuine.port)  # as the Deployment makes it
        await genuine.first_call(0, "load", "add")
        worker = operator.workers.get(KEY)
        for _ in range(2):
            seen = await worker.next_pass()
        assert [pod.name for pod in seen.pods] == ["triton-a"]
        assert harvester.calls == []
        assert (cluster.pod_condition("triton-a") or {}).get("status") == "True"
        assert all(cluster.pod_condition(name) is None for name in ("labels-only", "stray-replicaset"))
