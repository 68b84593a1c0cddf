"""The operator in-process against the emulated API server, and real tritonservers standing in for pods."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import io
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import kmock
import kopf

from tests.support.cluster import ApiCall, ApiServer
from tests.support.crd_check import crd_errors
from tests.support.ports import free_ports
from triton_operator.api.server import TritonServerSpec
from triton_operator.k8s.process import metrics
from triton_operator.k8s.process.settings import Settings
from triton_operator.k8s.watch.handlers import Operator, register
from triton_operator.local.tritonserver import LocalTriton, Ports
from triton_operator.render.deployment import TEMPLATE_HASH_ANNOTATION
from triton_operator.render.schema import check_manifests

NAMESPACE = "default"
# The operator's identity: kopf and the operator's own client send it, the test's user requests do not.
OPERATOR_TOKEN = "triton-operator-service-account"
PATHS = {
    "TritonServer": "/apis/triton-operator.io/v1alpha1/namespaces/{ns}/tritonservers",
    "TritonModel": "/apis/triton-operator.io/v1alpha1/namespaces/{ns}/tritonmodels",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "Secret": "/api/v1/namespaces/{ns}/secrets",
    "Service": "/api/v1/namespaces/{ns}/services",
    "Pod": "/api/v1/namespaces/{ns}/pods",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "HorizontalPodAutoscaler": "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
    "ScaledObject": "/apis/keda.sh/v1alpha1/namespaces/{ns}/scaledobjects",
    "NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
    "ReplicaSet": "/apis/apps/v1/namespaces/{ns}/replicasets",
}
RESOURCES = {
    "TritonServer": "triton-operator.io/v1alpha1/tritonservers",
    "TritonModel": "triton-operator.io/v1alpha1/tritonmodels",
    "ConfigMap": "v1/configmaps",
    "Secret": "v1/secrets",
    "Service": "v1/services",
    "Pod": "v1/pods",
    "Deployment": "apps/v1/deployments",
    "ReplicaSet": "apps/v1/replicasets",
    "Event": "v1/events",
    "HorizontalPodAutoscaler": "autoscaling/v2/horizontalpodautoscalers",
    "ScaledObject": "keda.sh/v1alpha1/scaledobjects",
    "NetworkPolicy": "networking.k8s.io/v1/networkpolicies",
}


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """What a controller writes into the objects it makes: the ownerReference marked controller."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def replica_set_of(deployment: dict[str, Any]) -> dict[str, Any]:
    """The ReplicaSet the Deployment controller keeps for the Deployment's pod template: labelled as its
    pods, controlled by the Deployment (what makes its pods the server's: k8s/watch/indexes.py Indexes.pods_of)."""
    template = deployment["spec"]["template"]
    template_hash = deployment["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{deployment['metadata']['name']}-{template_hash}",
            "labels": template["metadata"]["labels"],
            "ownerReferences": [owner_reference(deployment)],
        },
        "spec": {"replicas": 0, "selector": deployment["spec"]["selector"], "template": template},
    }


def pod_of(replica_set: dict[str, Any], name: str, grpc_port: int) -> dict[str, Any]:
    """A Pod as the ReplicaSet would make it, its Triton's gRPC port declared."""
    template = replica_set["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": template["metadata"]["labels"],
            "ownerReferences": [owner_reference(replica_set)],
        },
        "spec": {
            "containers": [
                {
                    "name": "tritonserver",
                    "image": "tritonserver",
                    "ports": [{"name": "grpc", "containerPort": grpc_port}],
                }
            ],
            "readinessGates": template["spec"]["readinessGates"],
        },
    }


def running_at(address: str) -> dict[str, Any]:
    """The status patch of a Pod scheduled and running at this address."""
    return {"status": {"phase": "Running", "podIP": address}}


class Cluster:
    """Reading and writing the emulated cluster as a user (kubectl) would."""

    def __init__(self, server: ApiServer, url: str):
        self.server = server
        self.url = url.rstrip("/")

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            async with session.request(
                method, self.url + path, json=body, headers={"Content-Type": content_type}
            ) as response:
                payload = await response.json(content_type=None)
                assert response.status < 400, (method, path, payload)
                return payload

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", PATHS[obj["kind"]].format(ns=NAMESPACE), obj)

    async def patch(self, kind: str, name: str, body: dict[str, Any], subresource: str = "") -> dict[str, Any]:
        path = f"{PATHS[kind].format(ns=NAMESPACE)}/{name}" + (f"/{subresource}" if subresource else "")
        return await self.request("PATCH", path, body, "application/merge-patch+json")

    async def delete(self, kind: str, name: str) -> None:
        await self.request("DELETE", f"{PATHS[kind].format(ns=NAMESPACE)}/{name}")

    async def scale(self, kind: str, name: str, replicas: int | None = None, method: str = "PATCH") -> dict[str, Any]:
        """Read the object's Scale, or write its replicas as `kubectl scale` does (PATCH) or an HPA (PUT)."""
        path = f"{PATHS[kind].format(ns=NAMESPACE)}/{name}/scale"
        if replicas is None:
            return await self.request("GET", path)
        body = (
            {"spec": {"replicas": replicas}}
            if method == "PATCH"
            else {**await self.request("GET", path), "spec": {"replicas": replicas}}
        )
        return await self.request(
            method, path, body, "application/merge-patch+json" if method == "PATCH" else "application/json"
        )

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        key = (kmock.resource(RESOURCES[kind]), NAMESPACE, name)
        if key not in self.server.objects or self.server.objects[key].deleted:
            return None
        return dict(self.server.objects[key].raw)

    def all(self, kind: str) -> list[dict[str, Any]]:
        resource = kmock.resource(RESOURCES[kind])
        return [
            dict(obj.raw) for (res, _, _), obj in self.server.objects.items() if res == resource and not obj.deleted
        ]

    async def wait(self, what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
        """Until `check()` returns something truthy; it re-reads state each time, nothing is assumed."""
        deadline = time.monotonic() + timeout
        while True:
            result = check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
            await asyncio.sleep(0.05)

    async def wait_async(self, what: str, check: Callable[[], Awaitable[Any]], timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            result = await check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
            await asyncio.sleep(0.05)

    def operator_calls(self) -> list[ApiCall]:
        """Every resource request the operator (kopf and its own client) made so far."""
        return self.server.calls(authorization=f"Bearer {OPERATOR_TOKEN}")

    def control_key(self, server: str) -> str | None:
        return self.key(server, "control")

    def key(self, server: str, which: str) -> str | None:
        """One of the server's keys (control, shm), from its Secret."""
        secret = self.get("Secret", f"{server}-{which}")
        return base64.b64decode(secret["data"][f"{which}-key"]).decode() if secret else None

    async def add_pod(self, server: str, name: str, address: str, grpc_port: int) -> None:
        """A Pod as the Deployment's ReplicaSet would make it, scheduled and running at this address (a Triton's,
        or none); the ReplicaSet made first where the Deployment controller has not made it yet."""
        deployment = await self.wait(
            f"Deployment {server}", lambda: self.get("Deployment", server)
        )  # pods come from it
        wanted = replica_set_of(deployment)
        replica_set = self.get("ReplicaSet", wanted["metadata"]["name"]) or await self.create(wanted)
        await self.create(pod_of(replica_set, name, grpc_port))
        await self.patch("Pod", name, running_at(address), subresource="status")

    def pod_condition(self, name: str) -> dict[str, Any] | None:
        pod = self.get("Pod", name) or {}
        return next(
            (
                c
                for c in (pod.get("status") or {}).get("conditions") or []
                if c["type"] == "triton-operator.io/models-ready"
            ),
            None,
        )

    def condition(self, kind: str, name: str, type_: str) -> dict[str, Any] | None:
        obj = self.get(kind, name) or {}
        return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


@contextlib.asynccontextmanager
async def api_server(request_history: int | None = None) -> AsyncIterator[Cluster]:
    async with ApiServer(request_history=request_history) as server, kmock.Server(server) as http:
        cluster = Cluster(server, str(http.url))
        await cluster.request(
            "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        yield cluster


@contextlib.asynccontextmanager
async def running_operator(
    cluster: Cluster, namespaces: Sequence[str] = (), **settings: Any
) -> AsyncIterator[Operator]:
    """The operator in this event loop, cluster-wide or in `namespaces` (as `run -A` or `run -n`), stopped cleanly
    at the end."""
    registry = kopf.OperatorRegistry()
    values = {"resync_seconds": 60, "retry_seconds": 0.2, "metrics_port": 0, "liveness_port": 0} | settings

    async def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=cluster.url, insecure=True, token=OPERATOR_TOKEN)

    operator = register(registry, Settings(**values), login=login)
    stop, ready = asyncio.Event(), asyncio.Event()
    scope = {"clusterwide": not namespaces, "namespaces": list(namespaces)}
    task = asyncio.create_task(
        kopf.operator(registry=registry, standalone=True, stop_flag=stop, ready_flag=ready, **scope)
    )
    await asyncio.wait_for(ready.wait(), 30)
    try:
        yield operator
    finally:
        stop.set()
        done, _ = await asyncio.wait([task], timeout=30)
        if not done:  # say what it waits on: a stop that hangs is a bug of its own
            task.cancel()
            raise AssertionError(f"the operator did not stop within 30 s; its tasks:\n{_task_stacks()}")


def _task_stacks() -> str:
    """Every task of this event loop with where it waits, as asyncio prints them."""
    out = io.StringIO()
    for pending in asyncio.all_tasks():
        print(f"{pending.get_name()}:", file=out)
        pending.print_stack(limit=8, file=out)
    return out.getvalue()


class Pods:
    """Real tritonservers, each on a loopback address of its own, as a Deployment's pods."""

    def __init__(self, workdir: Path, first_address: int = 2, model_repository: Path | None = None):
        """`model_repository`: the folder the pods' servers are started with (a PVC they mount); default, one each."""
        self.workdir = workdir
        self.model_repository = model_repository
        self.next_address = first_address
        self.tritons: dict[str, LocalTriton] = {}

    def start(self, name: str, control_key: str, **overrides: Any) -> LocalTriton:
        """A pod's tritonserver, with the flags rendered for a TritonServer of these spec fields (exitTimeoutSeconds 5
        unless given)."""
        address = f"127.0.0.{self.next_address}"
        self.next_address += 1
        spec = TritonServerSpec.model_validate({"exitTimeoutSeconds": 5, **overrides})
        triton = LocalTriton(
            spec,
            self.workdir / name,
            Ports(*free_ports(3)),
            control_key=control_key,
            address=address,
            model_repository=self.model_repository,
        )
        (self.workdir / name).mkdir(parents=True, exist_ok=True)
        triton.start()
        self.tritons[name] = triton
        return triton

    def restart(self, name: str) -> LocalTriton:
        """The same pod's container restarted: same address and ports, nothing loaded."""
        triton = self.tritons[name]
        triton.stop()
        triton.start()
        return triton

    def stop_all(self) -> list[str]:
        leftovers = []
        for triton in self.tritons.values():
            triton.stop()
            leftovers += [region.name for region in triton.shm_regions()]
        return leftovers


def load_calls(pod: str | None = None) -> float:
    """Load and reload calls the operator made (on one pod, or on all), from its own metrics."""
    return sum(
        sample.value
        for family in metrics.REGISTRY.collect()
        if family.name == "triton_operator_control_calls"
        for sample in family.samples
        if sample.name.endswith("_total")
        and sample.labels["action"] in ("load", "reload")
        and pod in (None, sample.labels["pod"])
    )


def assert_valid_objects(cluster: Cluster) -> None:
    """Every object the operator wrote passes kubernetes-validate --strict, every custom resource its CRD."""
    written = [
        obj
        for kind in ("Deployment", "Service", "Secret", "ConfigMap", "HorizontalPodAutoscaler", "NetworkPolicy")
        for obj in cluster.all(kind)
    ]
    assert check_manifests([strip_server_fields(obj) for obj in written]) == []
    for kind in ("TritonServer", "TritonModel"):
        for obj in cluster.all(kind):
            assert crd_errors(strip_server_fields(obj)) == [], obj["metadata"]["name"]


def strip_server_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """What the API server adds is valid there; kubernetes-validate checks what was sent."""
    obj = copy.deepcopy(obj)
    for key in ("uid", "resourceVersion", "generation", "creationTimestamp"):
        obj["metadata"].pop(key, None)
    return obj
