"""A mini cluster on the emulated API server, so that serving through scaling, rollouts and pod
deletion is measured rather than argued. Its parts, each a module whose docstring lists the rules it
keeps (each standing for one real behaviour) and what it leaves out:

- controller.py: the Deployment and ReplicaSet controllers (ReplicaSets per pod template, scaling,
  rolling updates within maxSurge and maxUnavailable, Deployment status).
- kubelet.py: one node's kubelet, running each pod as real processes (a tritonserver from the
  wheel) on a loopback address of its own, with probes, readiness gates, preStop, SIGTERM and
  SIGKILL at the grace period.
- garbage.py: the garbage collector's background cascading deletion (a deleted TritonServer takes its
  Deployment, which takes its ReplicaSets and their pods).
- service.py: kube-proxy, a TCP proxy per Service port balancing new connections over the Ready
  pods, the endpoints changing a propagation delay after the pods do.
- The API server's part (a Pod's graceful deletion) is tests/support/cluster.py's.

`mini_cluster()` runs them against a fresh emulated API server; `operated_cluster()` adds the
operator, so a TritonServer's pods are real tritonservers it fills with models, reached through the
Service. Each part makes its requests as an identity of its own, so the RBAC record of the
operator's requests (`Cluster.operator_calls`) holds the operator's only.

The parts run in a thread and event loop of their own, as a cluster runs apart from the operator:
kopf, stopping, cancels every task its event loop gained since it started (kopf's
`run_tasks`), which would take pods and connections down with an operator stopped or restarted
in a test. For the same reason the watch streams open before the operator starts, and every
other request has a connection of its own, so that no API-server task serving the cluster outlives
its request. At the end every process a pod started is gone and no /dev/shm region of theirs is
left, or the exit fails saying what is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.support.local_mode import processes_using
from tests.support.operator import Cluster, api_server, running_operator

from .client import ApiClient
from .controller import Controller
from .garbage import GarbageCollector
from .kubelet import Kubelet
from .service import Services

logger = logging.getLogger(__name__)


class MiniCluster:
    """The parts, reached from the test's event loop; their logs (`controller.events`,
    `kubelet.events`, `services.changes`, `services.connections`) only ever grow, so reading them
    from the test's thread is safe."""

    controller: Controller
    garbage: GarbageCollector
    kubelet: Kubelet
    services: Services

    def __init__(self, cluster: Cluster, workdir: Path, propagation_seconds: float, probe_seconds: float):
        self.cluster = cluster
        self.workdir = workdir
        self.settings = (propagation_seconds, probe_seconds)
        self.running: concurrent.futures.Future[None] = concurrent.futures.Future()  # set once every part watches
        self.stopped: concurrent.futures.Future[list[str]] = concurrent.futures.Future()  # the parts that crashed
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping: asyncio.Event | None = None
        self.thread = threading.Thread(target=asyncio.run, args=(self._run(),), name="mini-cluster")

    async def _run(self) -> None:
        """The parts' life in their own thread: started, watching, then stopped when told."""
        self.loop, self.stopping = asyncio.get_running_loop(), asyncio.Event()
        propagation_seconds, probe_seconds = self.settings
        opened = asyncio.Event()
        self.controller = Controller(ApiClient(self.cluster.url, "system:kube-controller-manager", opened))
        self.kubelet = Kubelet(ApiClient(self.cluster.url, "system:node:mini", opened), self.workdir, probe_seconds)
        self.services = Services(ApiClient(self.cluster.url, "system:kube-proxy", opened), propagation_seconds)
        self.garbage = GarbageCollector(
            ApiClient(self.cluster.url, "system:serviceaccount:kube-system:generic-garbage-collector", opened)
        )
        parts: dict[str, Any] = {
            "controller": self.controller,
            "kubelet": self.kubelet,
            "services": self.services,
            "garbage": self.garbage,
        }
        tasks = {name: asyncio.create_task(part.run(), name=name) for name, part in parts.items()}
        for task in tasks.values():
            task.add_done_callback(_report_crash)
        try:
            await asyncio.wait_for(_watching(parts.values(), opened), 60)
            self.running.set_result(None)
            await self.stopping.wait()
        finally:
            for task in tasks.values():
                task.cancel()
            outcomes = await asyncio.gather(*tasks.values(), return_exceptions=True)
            await self.kubelet.shutdown()
            for part in parts.values():
                await part.api.close()
            crashed = [
                f"{name}: {outcome!r}"
                for name, outcome in zip(tasks, outcomes, strict=False)
                if isinstance(outcome, Exception)
            ]
            if not self.running.done():
                self.running.set_exception(AssertionError(f"the mini cluster did not start: {crashed}"))
            self.stopped.set_result(crashed)

    async def start(self) -> None:
        self.thread.start()
        try:
            await asyncio.wrap_future(self.running)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> list[str]:
        """Stop the parts (every pod's processes with them); what crashed on the way."""
        if self.loop is not None and self.stopping is not None and not self.stopped.done():
            self.loop.call_soon_threadsafe(self.stopping.set)
        crashed = await asyncio.wrap_future(self.stopped)
        await asyncio.to_thread(self.thread.join)
        return crashed

    async def address(self, service: str, port: str) -> str:
        """host:port of a Service's port, once the Service exists."""
        assert self.loop is not None
        return await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(asyncio.wait_for(self.services.address(service, port), 60), self.loop)
        )

    def pods_of(self, deployment: str) -> list[dict[str, Any]]:
        """The Deployment's pods in the API (terminating ones too), oldest first."""
        replica_sets = {
            rs["metadata"]["name"]
            for rs in self.cluster.all("ReplicaSet")
            if rs["metadata"]["name"].rsplit("-", 1)[0] == deployment
        }
        pods = [
            pod
            for pod in self.cluster.all("Pod")
            if any(ref["name"] in replica_sets for ref in pod["metadata"].get("ownerReferences") or [])
        ]
        return sorted(pods, key=lambda pod: (pod["metadata"]["creationTimestamp"], pod["metadata"]["name"]))

    def leftovers(self) -> list[str]:
        """What the pods left running or in /dev/shm."""
        return sorted(set(self.kubelet.leftovers() + processes_using(self.workdir)))


async def _watching(parts: Any, opened: asyncio.Event) -> None:
    """Until every part watches what it watches."""
    while not all(set(part.WATCHED) <= part.api.watching for part in parts):
        opened.clear()
        await opened.wait()


def _report_crash(task: asyncio.Task[None]) -> None:
    """A part that stops on its own is a bug: said at once, not only at the end of the test."""
    if not task.cancelled() and task.exception() is not None:
        logger.error("the mini cluster's %s stopped", task.get_name(), exc_info=task.exception())


@contextlib.asynccontextmanager
async def mini_cluster(
    workdir: Path, propagation_seconds: float = 0.2, probe_seconds: float = 0.2, request_history: int | None = None
) -> AsyncIterator[MiniCluster]:
    """`request_history`: how many requests the emulated API server keeps (ApiServer); None keeps all."""
    async with api_server(request_history) as cluster:
        mini = MiniCluster(cluster, workdir, propagation_seconds, probe_seconds)
        await mini.start()
        try:
            yield mini
        finally:
            crashed = await mini.stop()
        assert not crashed, crashed
        assert not mini.kubelet.failures, "\n".join(mini.kubelet.failures)
        assert (left := mini.leftovers()) == [], left


@contextlib.asynccontextmanager
async def operated_cluster(
    workdir: Path, propagation_seconds: float = 0.2, request_history: int | None = None, **settings: Any
) -> AsyncIterator[MiniCluster]:
    """The mini cluster with the operator running on it (`settings` as running_operator takes them)."""
    async with (
        mini_cluster(workdir, propagation_seconds, request_history=request_history) as mini,
        running_operator(mini.cluster, **settings),
    ):
        yield mini
