"""kube-controller-manager's garbage collector, small: the one rule kept is background cascading
deletion, as a real cluster applies it to an object deleted without a propagation policy. Once an
object is gone from the API (its finalizers, if any, done), every object whose ownerReferences name
its uid is deleted, and so on down: a TritonServer takes its Deployment, the Deployment its
ReplicaSets, a ReplicaSet its pods (each pod then terminating as its kubelet runs it down).

Left out: foreground deletion, orphaning, owners of several dependents' kinds beyond those below, and
the collector's own finalizers.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .client import DEPLOYMENTS, NAMESPACE_PATH, PODS, REPLICA_SETS, SERVICES, ApiClient, ApiError

TRITON_SERVERS = f"/apis/triton-operator.io/v1alpha1{NAMESPACE_PATH}/tritonservers"
DEPENDENTS = (DEPLOYMENTS, REPLICA_SETS, PODS, SERVICES)  # the kinds whose owners are watched here


class GarbageCollector:
    WATCHED = (TRITON_SERVERS, DEPLOYMENTS, REPLICA_SETS)

    def __init__(self, api: ApiClient):
        self.api = api
        self.gone: asyncio.Queue[str] = asyncio.Queue()  # uids of owners deleted
        self.collected: list[str] = []  # "<resource>/<name>" of each dependent it deleted, e.g. deployments/b

    async def run(self) -> None:
        watches = [asyncio.create_task(self.api.follow(path, self._seen)) for path in self.WATCHED]
        try:
            while True:
                await self._collect(await self.gone.get())
        finally:
            for watch in watches:
                watch.cancel()
            await asyncio.gather(*watches, return_exceptions=True)

    def _seen(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.gone.put_nowait(obj["metadata"]["uid"])

    async def _collect(self, owner_uid: str) -> None:
        for path in DEPENDENTS:
            for obj in await self.api.list(path):
                if any(ref.get("uid") == owner_uid for ref in obj["metadata"].get("ownerReferences") or []):
                    try:
                        await self.api.request("DELETE", f"{path}/{obj['metadata']['name']}")
                    except ApiError as error:
                        if error.status != 404:
                            raise
                    self.collected.append(f"{path.rsplit('/', 1)[1]}/{obj['metadata']['name']}")
