"""A server's pods brought to the declared models over Triton's control API, and each pod's
readinessGate condition set from what its Triton then says.

Pods are independent: each pod's sync is a task of its own that sets that pod's gate as soon as it
ends. A sync reads the pod, starts its loads and unloads, and waits for them at most half a read
timeout: what is still loading then goes on under the pod's Replica (a slow load holds up no other
model), is reported as loading, and its end wakes the worker for another pass. A pass waits for the
syncs it started at most one read timeout; a sync still running then goes on, the pass reports the
pod as waiting, and its end with an answer wakes the worker for another pass. A sync running that
long is one whose reads go unanswered (a pod that accepts connections and never answers): the pass
names the pod unanswered, and its models' state there reads UNREACHABLE. A pod is never synced
twice at once.

Two syncs start between passes, because a pass waits for the statuses it writes (one request per
changed model) and a new pod changes every model's status: with 50 models a new pod waited many
seconds for a pass to start its loads, and as long again for one to set its gate once they ended.
So a pod that gets its address is synced when the worker is woken for it, with what the last pass gave
the others (unless a canary rollout runs: the pass picks the canaries); and a pod out of service whose
last load ends is synced again at once, with what its last sync was given, which sets its gate. A
pass waits for such a sync before it syncs the pod.

A model whose first load is probed (spec.rollout.probe.onFirstLoad) gets one probe request after that
load ends on a pod, in that pod's sync, and counts as ready there only once it answered as a client
would count answered (k8s/rollouts/canary_prober.py).

Fail static: a pod the operator cannot reach (no answer, a refused key) keeps its gate as it was;
only what Triton says (a model it served is gone, a load it refused of a model other pods serve)
turns a gate False. What the gate means is decide/readiness_gate.py pod_condition's; a model held back
for killing the server's tritonservers (k8s/server/crash_watch.py) counts for nothing in it, nor is it loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ...api.rollout_spec import ProbeSpec
from ...decide.readiness_gate import PodStanding, pod_condition
from ...decide.seen import Pass, Pod, ServerKey
from ...protocol.desired import DesiredModel
from ...triton.batching import ModelStatistics
from ...triton.client import ControlClient, ControlError, Timeouts
from ...triton.sync import Outcome, Progress, Replica, ReplicaReport
from ...triton.sync_plan import Action
from ..api import API_FAILURES, KubernetesApi, failure
from ..process import metrics
from ..process.settings import Settings
from ..rollouts.canary_prober import FirstProbe, first_probes, probe_first_load
from ..server.crash_watch import CrashWatch
from ..watch.indexes import Indexes

logger = logging.getLogger(__name__)
# How long a pod's sync waits for the loads it started before it reports. A python model's load or
# reload ends within it (bench/RESULTS.md, "Measurements behind the design"), so its own pass reports
# it; a longer one is reported by a pass of its own (its end wakes the worker). The worker runs one pass
# at a time, so this is also how long a pass that started a long load holds up an edit of another model
# that comes meanwhile.
SETTLE_SECONDS = 0.5


@dataclass(frozen=True)
class SyncOrder:
    """What a pass gave a pod's sync."""

    desired: dict[str, DesiredModel]
    keep: set[str]
    managed: set[str]
    first_load: Mapping[str, ProbeSpec]


@dataclass(frozen=True)
class PodResult:
    """One pod's sync: the report, Triton's statistics read after it, and its gate as it now stands."""

    report: ReplicaReport
    statistics: dict[str, ModelStatistics] = field(default_factory=dict)
    in_service: bool = False  # its readinessGate condition is True
    gate_written: bool = True  # False: the API server did not take the condition (the pass is tried again)


class PodSync:
    """Syncs every pod of one server; remembers one Replica per pod uid and the syncs still running."""

    def __init__(
        self, key: ServerKey, indexes: Indexes, api: KubernetesApi, settings: Settings, wake: Callable[[], None]
    ):
        self.key = key
        self.indexes = indexes
        self.api = api
        self.settings = settings
        self.wake = wake  # another pass, when a sync ends after its pass moved on
        self.replicas: dict[str, Replica] = {}  # pod uid -> its sync memory and client
        self.running: dict[str, asyncio.Task[PodResult]] = {}  # pod uid -> its sync, until it ends
        self.limit = asyncio.Semaphore(settings.parallel_pods)
        self.control_key: str | None = None  # the key the replicas' clients were made with
        self.last_results: dict[str, PodResult] = {}  # pod uid -> how its last sync ended
        self.served: dict[str, frozenset[str]] = {}  # pod uid -> the models ready on it at its last answered sync
        self.synced_with: dict[str, tuple[Pod, SyncOrder]] = {}  # pod uid -> the pod and what its last sync was given
        self.given: SyncOrder | None = None  # what the last pass gave every pod, None while it ran a canary
        self.between_passes: set[asyncio.Task[PodResult]] = set()  # the syncs started between passes, until they end
        self.health: asyncio.Task[None] | None = None  # the watch for models failing every request, between passes
        self.first_probes: dict[
            str, dict[str, FirstProbe]
        ] = {}  # pod uid -> model -> its first-load probe, due or failed
        self.crash_watch = CrashWatch(key[1])

    async def sync(
        self,
        desired: Mapping[str, DesiredModel],
        keep: set[str],
        managed: set[str],
        control_key: str,
        canary: Mapping[str, Mapping[str, DesiredModel]] | None = None,
        first_load: Mapping[str, ProbeSpec] | None = None,
    ) -> Pass:
        """Start a sync of every pod not syncing already, and report what is known within one read timeout.
        `canary` names, by pod, the models it runs at another revision than `desired` (a canary rollout);
        `first_load`, by model, the probe that judges its first load on a pod."""
        canaries = {pod: dict(models) for pod, models in (canary or {}).items()}
        pods = self.indexes.pods_of(self.key)
        live = [pod for pod in pods if pod.address and not pod.deleting]
        if control_key != self.control_key:
            await self.close()  # clients carry the key: made anew with the new one
            self.control_key = control_key
        else:
            await self.close(set(self.replicas) - {pod.uid for pod in live})
        started: dict[str, asyncio.Task[PodResult]] = {}
        self.crash_watch.retain(pod.uid for pod in pods)
        # A pod whose tritonserver restarted: what its sync remembers (and a load of a held model) ends with it.
        await self.close({pod.uid for pod in live if self.crash_watch.died(pod, desired)})
        if self.health is None and self.settings.health_check_seconds:
            self.health = asyncio.get_running_loop().create_task(self._watch_health())
        if self.between_passes:  # they end within a read, unless the pod does not answer: then it is waiting
            await asyncio.wait(self.between_passes, timeout=self.settings.read_timeout_seconds)
        self.given = None if canaries else SyncOrder(dict(desired), keep, managed, first_load or {})
        for pod in live:
            if pod.uid not in self.running:
                self.synced_with[pod.uid] = (
                    pod,
                    SyncOrder({**desired, **canaries.get(pod.name, {})}, keep, managed, first_load or {}),
                )
                started[pod.name] = self._start(pod, self.synced_with[pod.uid][1])
        if started:
            await asyncio.wait(started.values(), timeout=self.settings.read_timeout_seconds)
        results = {name: task.result() for name, task in started.items() if task.done()}
        for pod in live:  # still syncing, and did not answer last time: it stays unreachable
            last = self.last_results.get(pod.uid)
            if pod.name not in results and last is not None and last.report.error:
                results[pod.name] = last
        for task in started.values():
            if not task.done():
                task.add_done_callback(self._wake_if_answered)
        waiting = [pod for pod in live if pod.name not in results]
        unanswered = [pod.name for pod in waiting if self._unanswered(pod)]
        in_service = [name for name, result in results.items() if result.in_service] + [
            pod.name for pod in waiting if pod.models_ready == "True"
        ]
        unreachable = sum(1 for result in results.values() if result.report.error)
        for state, count in (
            ("Synced", len(results) - unreachable),
            ("Unreachable", unreachable),
            ("Waiting", len(waiting)),
        ):
            metrics.PODS.labels(*self.key, state).set(count)
        return Pass(
            reports={name: result.report for name, result in results.items()},
            pods=pods,
            desired=dict(desired),
            ready_pods=sorted(in_service),
            synced=True,
            statistics={name: result.statistics for name, result in results.items()},
            waiting=[pod.name for pod in waiting],
            unanswered=unanswered,
            gates_unwritten=sorted(name for name, result in results.items() if not result.gate_written),
            canary=canaries,
            crashed=self.crash_watch.held_back(desired),
        )

    def forget_failures(self, models: set[str]) -> None:
        """Every pod's next sync loads these models again, at the revision whose load failed there, and
        probes again those whose first probe failed there."""
        for replica in self.replicas.values():
            replica.forget_failures(models)
        for probes in self.first_probes.values():
            for name in models & probes.keys():
                probes[name] = FirstProbe(probes[name].revision)

    def sync_new_pods(self) -> None:
        """Start the first sync of each pod that got its address since the last pass, with what that pass
        gave every pod."""
        if self.given is None:
            return
        for pod in self.indexes.pods_of(self.key):
            if pod.address and not pod.deleting and pod.uid not in self.synced_with and pod.uid not in self.running:
                self.synced_with[pod.uid] = (pod, self.given)
                self._start_between_passes(pod, self.given)

    def _start(self, pod: Pod, order: SyncOrder) -> asyncio.Task[PodResult]:
        task = asyncio.get_running_loop().create_task(
            self._sync_pod(pod, order.desired, order.keep, order.managed, order.first_load)
        )

        def ended(finished: asyncio.Task[PodResult]) -> None:
            if self.running.get(pod.uid) is finished:  # not a newer sync of the pod's
                self.running.pop(pod.uid)

        task.add_done_callback(ended)
        self.running[pod.uid] = task
        return task

    def _start_between_passes(self, pod: Pod, order: SyncOrder) -> None:
        task = self._start(pod, order)
        self.between_passes.add(task)
        task.add_done_callback(self.between_passes.discard)

    def _load_ended(self, uid: str) -> None:
        """An action on a pod ended with no sync waiting for it: a pass reports it, and a pod out of
        service with nothing more in flight gets its gate now, from a sync of its own. A pod joining a
        server that serves already is reported once its last action ends: its models' statuses count it
        once it has joined (decide/status_content.py), and a pass at each load's end re-read every model on
        every pod (bench/RESULTS.md, scale-up)."""
        last = self.synced_with.get(uid)
        replica = self.replicas.get(uid)
        pods = self.indexes.pods_of(self.key)
        pod = next((pod for pod in pods if pod.uid == uid), None)
        out_of_service = pod is not None and not pod.deleting and pod.models_ready != "True"
        serving = any(other.models_ready == "True" and not other.deleting for other in pods if other.uid != uid)
        if not (out_of_service and serving and replica is not None and replica.busy):
            self.wake()
        if last is None or replica is None or replica.busy or uid in self.running:
            return
        if pod is not None and out_of_service:
            self._start_between_passes(pod, last[1])

    def _unanswered(self, pod: Pod) -> bool:
        """The pod's sync is in a read unanswered for half a read timeout or more: not a long load (that
        runs on after its sync), a pod that does not answer."""
        replica = self.replicas.get(pod.uid)
        since = replica.reading_since if replica is not None else None
        return since is not None and time.monotonic() - since >= self.settings.read_timeout_seconds / 2

    def _wake_if_answered(self, task: asyncio.Task[PodResult]) -> None:
        """A sync that outlived its pass and ended with an answer: another pass writes what it did. One
        without an answer waits for the worker's backoff (waking at once would retry a silent pod hot)."""
        if not task.cancelled() and task.exception() is None and not task.result().report.error:
            self.wake()

    async def _sync_pod(
        self,
        pod: Pod,
        desired: dict[str, DesiredModel],
        keep: set[str],
        managed: set[str],
        first_load: Mapping[str, ProbeSpec],
    ) -> PodResult:
        """Sync one pod, probe its first loads, read its statistics, and set its gate from what its Triton said."""
        desired, keep = self.crash_watch.order(desired, keep)
        replica = self._replica(pod)
        standing = self._standing(pod)
        statistics: dict[str, ModelStatistics] = {}
        async with self.limit:
            report = await replica.sync(
                desired, managed, progress=self._progress(pod), keep=keep, settle_seconds=SETTLE_SECONDS
            )
            if not report.error:
                await self._probe_first_loads(pod, desired, report, first_load)
                self.served[pod.uid] = frozenset(
                    name for name, state in report.states.items() if state.ready and name not in report.probe_failed
                )
                with contextlib.suppress(ControlError):  # batching figures and health wait for the next pass
                    statistics = await replica.client.statistics()
                    replica.heal(desired, statistics, report, self._progress(pod))
        wanted = pod_condition(desired, report, standing)
        if wanted is None:
            why = (
                "refuses the control key (it was started with another one: the Secret is "
                "read again, and the pods roll when the key changed)"
                if report.key_refused
                else "did not answer"
            )
            logger.warning(
                "pod %s of TritonServer %s/%s %s: %s; its readiness is left as it was",
                pod.name,
                *self.key,
                why,
                report.error,
            )
            result = PodResult(report, statistics, in_service=pod.models_ready == "True")
        elif wanted["status"] == pod.models_ready and wanted["status"] == "True":
            result = PodResult(report, statistics, in_service=True)
        else:
            try:
                await self.api.set_pod_condition(self.key[0], pod.name, wanted)
                result = PodResult(report, statistics, in_service=wanted["status"] == "True")
            except API_FAILURES as error:
                logger.warning(
                    "setting the readiness of pod %s of TritonServer %s/%s failed: %s",
                    pod.name,
                    *self.key,
                    failure(error),
                )
                result = PodResult(report, statistics, in_service=pod.models_ready == "True", gate_written=False)
        self.last_results[pod.uid] = result
        return result

    async def _probe_first_loads(
        self, pod: Pod, desired: Mapping[str, DesiredModel], report: ReplicaReport, probes: Mapping[str, ProbeSpec]
    ) -> None:
        """Send the pod's due first-load probes; what failed goes into `report` and stays for its next syncs."""
        judged = first_probes(self.first_probes.get(pod.uid, {}), report, desired, probes.keys())
        due = [name for name, probe in judged.items() if probe.failure is None]
        assert pod.address is not None
        answers = await asyncio.gather(*(probe_first_load(pod.address, desired[name], probes[name]) for name in due))
        judged |= {name: FirstProbe(judged[name].revision, why) for name, why in zip(due, answers, strict=False)}
        failed = self.first_probes[pod.uid] = {name: probe for name, probe in judged.items() if probe.failure}
        report.probe_failed = {name: probe.failure for name, probe in failed.items() if probe.failure}
        for name in due:
            if name in failed:
                logger.warning("model %s on pod %s: %s", name, pod.name, failed[name].failure)

    async def _watch_health(self) -> None:
        """Between passes, every health_check_seconds: read each idle pod's statistics and reload a model
        failing every request there, as a pass does after each sync; the reload's end wakes the worker,
        whose pass then writes it into the statuses."""
        while True:
            await asyncio.sleep(self.settings.health_check_seconds)
            for uid, (pod, order) in list(self.synced_with.items()):
                replica = self.replicas.get(uid)
                if replica is None or uid in self.running:
                    continue
                with contextlib.suppress(ControlError):  # a pod that does not answer is the pass's to report
                    replica.heal(
                        order.desired,
                        await replica.client.statistics(),
                        ReplicaReport(replica.client.url),
                        self._progress(pod),
                    )

    def _standing(self, pod: Pod) -> PodStanding:
        elsewhere = frozenset().union(*(served for uid, served in self.served.items() if uid != pod.uid))
        return PodStanding(
            in_service=pod.models_ready == "True", served=self.served.get(pod.uid), ready_elsewhere=elsewhere
        )

    def _replica(self, pod: Pod) -> Replica:
        replica = self.replicas.get(pod.uid)
        if replica is None or replica.client.url != pod.address:
            timeouts = Timeouts(self.settings.read_timeout_seconds, self.settings.load_timeout_seconds)
            assert pod.address is not None
            replica = Replica(
                ControlClient(pod.address, self.control_key, timeouts),
                self.settings.parallel_loads,
                on_ended=functools.partial(self._load_ended, pod.uid),
                adopt_seconds=self.settings.load_timeout_seconds,
            )
            self.replicas[pod.uid] = replica
        return replica

    def _progress(self, pod: Pod) -> Progress:
        namespace, server = self.key

        def record(_endpoint: str, action: Action, outcome: Outcome | None) -> None:
            self.crash_watch.progress(pod.uid, action, outcome)
            if outcome is None:
                return
            labels = (namespace, server, action.model, pod.name, action.kind)
            metrics.CONTROL_CALLS.labels(*labels, "ok" if outcome.ok else "error").inc()
            metrics.CONTROL_CALL_SECONDS.labels(namespace, server, action.kind).observe(outcome.seconds)
            if not outcome.ok:
                logger.warning("%s %s on pod %s failed: %s", action.kind, action.model, pod.name, outcome.error)
            elif action.kind == "heal":
                logger.warning("reloaded %s on pod %s: it read ready but failed every request", action.model, pod.name)

        return record

    async def close(self, uids: Iterable[str] | None = None) -> None:
        """Stop the syncs and close the clients of these pods (all when None, the health watch too)."""
        if uids is None and self.health is not None:
            self.health.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.health
            self.health = None
        for uid in set(self.replicas) | set(self.running) if uids is None else set(uids):
            task = self.running.pop(uid, None)
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self.last_results.pop(uid, None)
            self.served.pop(uid, None)
            self.synced_with.pop(uid, None)
            self.first_probes.pop(uid, None)
            replica = self.replicas.pop(uid, None)
            if replica is not None:
                await replica.close()
