"""The Deployment and ReplicaSet controllers of kube-controller-manager, small, against the emulated
API server. The rules kept, each standing for the real controller's:

- A Deployment owns one ReplicaSet per pod template: named `<deployment>-<hash>`, labelled (and
  selecting) `pod-template-hash=<hash>`, the hash of the template; made when the template is new.
- Rolling update: the new ReplicaSet grows while all ReplicaSets together ask for at most
  replicas + maxSurge pods; old ones shrink, their unhealthy replicas first, only while at least
  replicas - maxUnavailable pods stay available. A pod is available once Ready (minReadySeconds is
  left out). maxSurge and maxUnavailable are numbers or percentages (surge rounded up, unavailable
  down; both 0 means 1 unavailable).
- Scaling: spec.replicas goes to the new ReplicaSet, within the same bounds during a rollout (the
  real controller's proportional scaling of a rollout in progress is left out).
- A ReplicaSet keeps spec.replicas active (not terminating) pods: made from its template with an
  ownerReference to it, named `<replicaset>-<5 characters>` (generateName), bound to the one node
  (`spec.nodeName`: the scheduler is left out); the surplus is deleted not-Ready first, then newest.
- Deployment status: replicas, updatedReplicas, readyReplicas, availableReplicas,
  observedGeneration. ReplicaSet status is not written: the Deployment controller counts the pods.
- It acts on watch events and decides from lists read afresh each pass, so it always sees its own
  writes (the real one reads an informer cache, guarded by expectations and resourceVersions).
- Left out: the Recreate strategy, paused Deployments, revision history, progress deadlines and
  conditions (garbage collection is garbage.py's).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.support.operator import owner_reference

from .client import DEPLOYMENTS, MERGE_PATCH, PODS, REPLICA_SETS, ApiClient

HASH_LABEL = "pod-template-hash"
NODE = "mini"  # the one node: its kubelet runs every pod


@dataclass(frozen=True)
class Event:
    """One line of the controller's log: a pod as its watch delivered it, or a write it made."""

    at: float  # time.monotonic()
    what: str  # "pod" (a watch event), "create-pod", "delete-pod", "scale" (a ReplicaSet), "create-replicaset"
    name: str  # the pod's or ReplicaSet's
    owner: str = ""  # a pod's ReplicaSet
    active: bool = False  # a pod: there and not terminating (what a ReplicaSet counts)
    in_service: bool = False  # a pod: Ready and not terminating (what a Service routes to)
    replicas: int | None = None  # the ReplicaSet's new spec.replicas


def template_hash(template: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def is_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def is_terminating(obj: Mapping[str, Any]) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    return next((ref["uid"] for ref in obj["metadata"].get("ownerReferences") or [] if ref.get("controller")), None)


def rolling_bounds(deployment: Mapping[str, Any]) -> tuple[int, int]:
    """maxSurge and maxUnavailable as pod counts (Kubernetes' defaults: 25% each)."""
    rolling = (deployment["spec"].get("strategy") or {}).get("rollingUpdate") or {}
    replicas = deployment["spec"].get("replicas", 1)

    def count(value: int | str, round_up: bool) -> int:
        if isinstance(value, int):
            return value
        share = replicas * int(value.rstrip("%")) / 100
        return math.ceil(share) if round_up else math.floor(share)

    surge = count(rolling.get("maxSurge", "25%"), round_up=True)
    unavailable = count(rolling.get("maxUnavailable", "25%"), round_up=False)
    return surge, (1 if surge == unavailable == 0 else unavailable)


class Controller:
    """Deployments to ReplicaSets to pods; `events` is its log, for tests to replay."""

    WATCHED = (DEPLOYMENTS, REPLICA_SETS, PODS)

    def __init__(self, api: ApiClient):
        self.api = api
        self.events: list[Event] = []
        self.changed = asyncio.Event()

    async def run(self) -> None:
        watches = [asyncio.create_task(self.api.follow(path, self._seen)) for path in self.WATCHED]
        try:
            while True:
                await self.changed.wait()
                self.changed.clear()
                while await self._pass():  # a pass that wrote goes again at once, on fresh lists
                    pass
        finally:
            for watch in watches:
                watch.cancel()
            await asyncio.gather(*watches, return_exceptions=True)

    def pod_counts(self, deployment: str) -> list[tuple[float, int, int]]:
        """The Deployment's pods after each pod event the controller saw: (when, active, in service)."""
        pods: dict[str, Event] = {}
        counts = []
        for event in self.events:
            if event.what == "pod" and event.owner.rsplit("-", 1)[0] == deployment:
                pods[event.name] = event
                counts.append(
                    (event.at, sum(pod.active for pod in pods.values()), sum(pod.in_service for pod in pods.values()))
                )
        return counts

    def _seen(self, kind: str, obj: dict[str, Any]) -> None:
        if obj.get("kind") == "Pod":
            owner = next((ref["name"] for ref in obj["metadata"].get("ownerReferences") or []), "")
            active = kind != "DELETED" and not is_terminating(obj)
            self._log("pod", obj["metadata"]["name"], owner=owner, active=active, in_service=active and is_ready(obj))
        self.changed.set()

    def _log(self, what: str, name: str, **details: Any) -> None:
        self.events.append(Event(time.monotonic(), what, name, **details))

    async def _pass(self) -> bool:
        """One look at everything; True if it wrote anything but status (the next pass builds on it)."""
        deployments = await self.api.list(DEPLOYMENTS)
        replica_sets = await self.api.list(REPLICA_SETS)
        pods = await self.api.list(PODS)
        active: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            if not is_terminating(pod):
                active.setdefault(controller_uid(pod) or "", []).append(pod)
        for deployment in deployments:
            if await self._roll(deployment, replica_sets, active):
                return True
        wrote = False
        for replica_set in sorted(
            replica_sets, key=lambda rs: len(active.get(rs["metadata"]["uid"], [])) <= rs["spec"].get("replicas", 0)
        ):
            wrote |= await self._keep_pods(
                replica_set, active.get(replica_set["metadata"]["uid"], [])
            )  # surplus deleted before any pod is made
        return wrote

    async def _roll(
        self, deployment: dict[str, Any], replica_sets: list[dict[str, Any]], active: dict[str, list[dict[str, Any]]]
    ) -> bool:
        """One step of the Deployment towards its template and replicas; True if it wrote one."""
        replicas = deployment["spec"].get("replicas", 1)
        surge, unavailable = rolling_bounds(deployment)
        current_hash = template_hash(deployment["spec"]["template"])
        owned = sorted(
            (rs for rs in replica_sets if controller_uid(rs) == deployment["metadata"]["uid"]),
            key=lambda rs: (rs["metadata"]["creationTimestamp"], rs["metadata"]["name"]),
        )
        new = next((rs for rs in owned if rs["metadata"]["labels"].get(HASH_LABEL) == current_hash), None)
        old = [rs for rs in owned if rs is not new]

        def wanted(rs: Mapping[str, Any] | None) -> int:
            return 0 if rs is None else rs["spec"].get("replicas", 0)

        def available(rs: Mapping[str, Any] | None) -> int:
            return 0 if rs is None else sum(map(is_ready, active.get(rs["metadata"]["uid"], [])))

        # The new ReplicaSet grows within replicas + maxSurge (or shrinks to replicas, scaled down).
        total = sum(map(wanted, owned))
        target = min(replicas, wanted(new) + max(0, replicas + surge - total))
        if new is None:
            await self._create_replica_set(deployment, current_hash, target)
            return True
        if target != wanted(new):
            await self._scale(new, target)
            return True
        # Old ReplicaSets shrink while replicas - maxUnavailable pods stay available.
        if sum(map(wanted, old)):
            min_available = replicas - unavailable
            room = total - min_available - (wanted(new) - available(new))
            removable = sum(map(available, owned)) - min_available
            for rs in old:
                unhealthy = min(room, wanted(rs) - available(rs))
                if unhealthy > 0:
                    await self._scale(rs, wanted(rs) - unhealthy)
                    return True
            for rs in old:
                down = min(wanted(rs), removable)
                if room > 0 and down > 0:
                    await self._scale(rs, wanted(rs) - down)
                    return True
        await self._write_status(deployment, owned, new, active)
        return False

    async def _write_status(
        self,
        deployment: dict[str, Any],
        owned: list[dict[str, Any]],
        new: dict[str, Any],
        active: dict[str, list[dict[str, Any]]],
    ) -> None:
        pods = [pod for rs in owned for pod in active.get(rs["metadata"]["uid"], [])]
        ready = sum(map(is_ready, pods))
        status = {
            "observedGeneration": deployment["metadata"].get("generation", 1),
            "replicas": len(pods),
            "updatedReplicas": len(active.get(new["metadata"]["uid"], [])),
            "readyReplicas": ready,
            "availableReplicas": ready,
        }
        if any((deployment.get("status") or {}).get(key) != value for key, value in status.items()):
            await self.api.patch_status(f"{DEPLOYMENTS}/{deployment['metadata']['name']}", status)

    async def _create_replica_set(self, deployment: dict[str, Any], pod_hash: str, replicas: int) -> None:
        template = json.loads(json.dumps(deployment["spec"]["template"]))
        template["metadata"]["labels"] = {**template["metadata"].get("labels", {}), HASH_LABEL: pod_hash}
        selector = deployment["spec"]["selector"]["matchLabels"]
        name = f"{deployment['metadata']['name']}-{pod_hash}"
        replica_set = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "labels": template["metadata"]["labels"],
                "ownerReferences": [owner_reference(deployment)],
            },
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {**selector, HASH_LABEL: pod_hash}},
                "template": template,
            },
        }
        await self.api.request("POST", REPLICA_SETS, replica_set)
        self._log("create-replicaset", name, replicas=replicas)

    async def _scale(self, replica_set: dict[str, Any], replicas: int) -> None:
        name = replica_set["metadata"]["name"]
        await self.api.request("PATCH", f"{REPLICA_SETS}/{name}", {"spec": {"replicas": replicas}}, MERGE_PATCH)
        self._log("scale", name, replicas=replicas)

    async def _keep_pods(self, replica_set: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
        """Make or delete pods until the ReplicaSet has spec.replicas active ones; True if it did."""
        name = replica_set["metadata"]["name"]
        missing = replica_set["spec"].get("replicas", 0) - len(pods)
        for _ in range(missing):
            template = replica_set["spec"]["template"]
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    **template["metadata"],
                    "generateName": f"{name}-",
                    "ownerReferences": [owner_reference(replica_set)],
                },
                "spec": {**template["spec"], "nodeName": NODE},
            }
            created = await self.api.request("POST", PODS, pod)
            self._log("create-pod", created["metadata"]["name"], owner=name)
        newest_first = sorted(
            pods, key=lambda pod: (pod["metadata"]["creationTimestamp"], pod["metadata"]["name"]), reverse=True
        )
        surplus = sorted(newest_first, key=is_ready)[: max(0, -missing)]
        for pod in surplus:
            await self.api.request("DELETE", f"{PODS}/{pod['metadata']['name']}")
            self._log("delete-pod", pod["metadata"]["name"], owner=name)
        return missing != 0
