"""A server's pods brought to the declared models over Triton's control API, and each pod's
readinessGate condition set from what its Triton then says.

One Replica per pod (its gRPC client and what the sync remembers of it), reused from pass to pass
while the pod keeps its address; at most `parallel_pods` pods are synced at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping

from ..triton.batching import ModelStatistics
from ..triton.client import ControlClient, ControlError, Timeouts
from ..triton.sync import Action, DesiredModel, Outcome, Progress, Replica, ReplicaReport
from . import metrics
from .api import ApiError, KubernetesApi
from .settings import Settings
from .state import Indexes, Pod, ServerKey
from .status import Pass, pod_condition

logger = logging.getLogger(__name__)


class PodSync:
    """Syncs every pod of one server; remembers one Replica per pod uid."""

    def __init__(self, key: ServerKey, indexes: Indexes, api: KubernetesApi, settings: Settings):
        self.key = key
        self.indexes = indexes
        self.api = api
        self.settings = settings
        self.replicas: dict[str, Replica] = {}  # pod uid -> its sync memory and client

    async def sync(self, desired: Mapping[str, DesiredModel], keep: set[str], managed: set[str], control_key: str) -> Pass:
        """Each pod's models, its Triton statistics (for the batching verdict) and its readiness gate."""
        namespace, _ = self.key
        pods = self.indexes.pods_of(self.key)
        live = [pod for pod in pods if pod.address and not pod.deleting]
        await self.close(set(self.replicas) - {pod.uid for pod in live})
        limit = asyncio.Semaphore(self.settings.parallel_pods)

        async def one(pod: Pod) -> tuple[str, ReplicaReport, dict[str, ModelStatistics]]:
            replica = self._replica(pod, control_key)
            counters: dict[str, ModelStatistics] = {}
            async with limit:
                report = await replica.sync(desired, managed, progress=self._progress(pod), keep=keep)
                if not report.error:
                    with contextlib.suppress(ControlError):  # batching figures wait for the next pass
                        counters = await replica.client.statistics()
            return pod.name, report, counters

        results = await asyncio.gather(*(one(pod) for pod in live))
        reports = {name: report for name, report, _ in results}
        ready_pods = []
        for pod in live:
            wanted = pod_condition(desired, reports[pod.name])
            if wanted["status"] == "True":
                ready_pods.append(pod.name)
            if wanted["status"] != pod.models_ready or wanted["status"] == "False":
                with contextlib.suppress(ApiError):
                    await self.api.set_pod_condition(namespace, pod.name, wanted)
        statistics = {name: counters for name, _, counters in results}
        return Pass(reports=reports, pods=pods, desired=dict(desired), ready_pods=ready_pods, synced=True, statistics=statistics)

    def _replica(self, pod: Pod, control_key: str) -> Replica:
        replica = self.replicas.get(pod.uid)
        if replica is None or replica.client.url != pod.address:
            timeouts = Timeouts(self.settings.read_timeout_seconds, self.settings.load_timeout_seconds)
            assert pod.address is not None
            replica = Replica(ControlClient(pod.address, control_key, timeouts), self.settings.parallel_loads)
            self.replicas[pod.uid] = replica
        return replica

    def _progress(self, pod: Pod) -> Progress:
        namespace, server = self.key

        def record(_endpoint: str, action: Action, outcome: Outcome | None) -> None:
            if outcome is None:
                return
            labels = (namespace, server, action.model, pod.name, action.kind)
            metrics.CONTROL_CALLS.labels(*labels, "ok" if outcome.ok else "error").inc()
            metrics.CONTROL_CALL_SECONDS.labels(*labels).observe(outcome.seconds)
            if not outcome.ok:
                logger.warning("%s %s on pod %s failed: %s", action.kind, action.model, pod.name, outcome.error)

        return record

    async def close(self, uids: Iterable[str] | None = None) -> None:
        """Close the clients of these pods (all when None)."""
        for uid in list(self.replicas) if uids is None else uids:
            replica = self.replicas.pop(uid, None)
            if replica is not None:
                await replica.client.close()
