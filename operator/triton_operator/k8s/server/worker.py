"""One worker per TritonServer: the only place its pods are synced, so syncs of a server never overlap.

A worker wakes on changes to its server, its models, their ConfigMaps and its pods, and on the
resync timer, at its own point in the period (resync_phase). A pass decides, then acts, twice: it
observes (the indexes, the pure pass of parse, bind, validate, size and render for what changed, the
keys), plans (plan_pass: the children to write, what to delete, the pods' sync, the probes, Events),
executes the plan, concludes from what the execution reported (rollout verdicts, revisions to keep,
statuses, Events) and executes that. Only execute calls the API; the pass ends with what it could not
apply. Two edits at once become one or two passes, never two loads of one model racing on one pod.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...api.parse import DEFAULT_NAMESPACE
from ...api.resources import TritonServer
from ...api.traffic import NAMESPACE_NAME_LABEL, NetworkPeer
from ...decide.batching_verdict import BatchingJudge
from ...decide.last_good import desired_models
from ...decide.seen import ParsedModel, Pass, ServerKey, ServerOutcome
from ...protocol.desired import DesiredModel
from ...render.fleet import Fleet, RenderedServer, plan_fleet
from ...render.manifests import CONTROL_KEY, OPERATOR_NAMESPACE
from .. import events
from ..actions import (
    ApplyChildren,
    Delete,
    Executed,
    KeepRevision,
    PatchStatus,
    Plan,
    Probe,
    ReadAutoscaler,
    ReadMemory,
    Seen,
    SyncPods,
)
from ..api import KubernetesApi
from ..events import Event
from ..expectations import Expectations
from ..pods.pod_sync import PodSync
from ..process import metrics
from ..process.settings import Settings
from ..rollouts.canary_prober import Prober, first_load_probes
from ..rollouts.rollout_writes import Rollouts
from ..watch.indexes import Indexes
from .autoscaler_upkeep import Autoscaler, unwanted_autoscaler
from .children import Children
from .config_map_files import ConfigMapFiles
from .kept import Parses, Renderings
from .sidecar_reads import MemoryReadings
from .status_writer import StatusWriter

logger = logging.getLogger(__name__)


GOLDEN_FRACTION = (math.sqrt(5) - 1) / 2  # the golden ratio's fractional part


def resync_phase(place: int, period: float) -> float:
    """The point in the resync period at which the operator's `place`-th worker resyncs. Servers start
    together, and a change to a ConfigMap they share wakes them together: resyncs that followed each
    pass by the same delay would come together too, and an edit meanwhile waits at each of its steps
    through the event loop for a slice of every one of them (bench/RESULTS.md, "Measurements behind the design").
    Successive multiples of the golden ratio spread any number of workers evenly over the period: the
    widest gap is under 2.7 times the even one (30 servers: at most 4 in any tenth of it)."""
    return (place * GOLDEN_FRACTION) % 1 * period


def operator_peer(settings: Settings) -> NetworkPeer:
    """Where the operator's own pods run, let in to its servers' gRPC port by their NetworkPolicies."""
    namespace = settings.operator_namespace or os.environ.get("POD_NAMESPACE") or OPERATOR_NAMESPACE
    return NetworkPeer(
        namespace_labels={NAMESPACE_NAME_LABEL: namespace}, pod_labels=dict(settings.operator_pod_labels)
    )


class ServerWorker:
    """The loop of one server: passes one after another, each woken by a change or the resync."""

    def __init__(
        self,
        key: ServerKey,
        indexes: Indexes,
        api: KubernetesApi,
        settings: Settings,
        place: int = 0,
        files: ConfigMapFiles | None = None,
        moving: Callable[[str], None] = lambda namespace: None,
        expectations: Expectations | None = None,
    ):
        """`place`: how many workers the operator made before this one (where in the period it resyncs);
        `files`: the models' files ConfigMaps, shared by the workers; `moving`: told the namespace after a
        pass that loaded models moving here (placement then names this server for them)."""
        self.key = key
        self.moving = moving
        self.indexes = indexes
        self.settings = settings
        self.files = files or ConfigMapFiles(api)
        self.api = api
        self.expectations = expectations or Expectations()
        self.loop = asyncio.get_running_loop()  # the only loop that may wake it
        self.children = Children(
            key, indexes, api, operator_peer(settings), settings.control_key_max_age_seconds, self.expectations
        )
        self.pods = PodSync(key, indexes, api, settings, wake=self.wake)
        self.batching = BatchingJudge()
        self.memory = MemoryReadings(key, self.wake, settings.memory_read_seconds)
        self.autoscaler = Autoscaler(key, api)
        self.statuses = StatusWriter(key, api, self.expectations)
        self.rollouts = Rollouts(key, indexes, api, self.expectations)
        self.prober = Prober()
        self.last_good: dict[str, DesiredModel] = {}  # model uid -> what runs for it: its last valid rendering
        self.parses = Parses()
        self.renderings = Renderings()
        self.wakeup = asyncio.Event()
        self.started = self.finished = 0  # passes begun and ended
        self.done = asyncio.Condition()
        self.last_pass = Pass()  # what the latest pass saw; one that synced no pod saw none
        self.retry_seconds = settings.retry_seconds
        self.rolling_out = (
            False  # the last pass found a canary rollout in flight: passes come every rollout_poll_seconds
        )
        self.left: list[str] = []  # what the last pass could not apply (empty: it settled)
        self.resync_phase = resync_phase(place, settings.resync_seconds)

    @property
    def label(self) -> str:
        return f"{self.key[0]}/{self.key[1]}"

    def wake(self) -> None:
        """Start a pass soon. Only on the worker's own event loop: asyncio.Event is not thread-safe, and
        a wake from another thread would be lost (or land late), so it is refused."""
        try:
            on_its_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:  # no loop runs in this thread
            on_its_loop = False
        if not on_its_loop:
            raise RuntimeError(f"the worker of TritonServer {self.label} is woken on its event loop only")
        self.wakeup.set()
        self.pods.sync_new_pods()  # a new pod's loads wait for no pass (it may be writing statuses for seconds)

    def retry_failed(self, models: set[str]) -> None:
        """These models were saved again: forget their failed loads on every pod, and pass soon to load them."""
        self.pods.forget_failures(models)
        self.wake()

    async def run(self) -> None:
        """Reconcile until the server and every model naming it are gone."""
        try:
            while True:
                self.wakeup.clear()
                self.started += 1
                delay = await self._reconcile_once()
                async with self.done:
                    self.finished += 1
                    self.done.notify_all()
                if self.indexes.server(self.key) is None and not self.indexes.models_of(self.key):
                    return
                try:
                    async with asyncio.timeout(delay):  # not wait_for: on 3.11 it drops a stop that meets a wake
                        await self.wakeup.wait()
                except TimeoutError:
                    if not self.rolling_out:  # a resync (not a rollout's poll) also restores children someone deleted
                        self.children.forget()
                        self.rollouts.forget()
        finally:
            await self.pods.close()
            await self.memory.close()

    async def next_pass(self) -> Pass:
        """Wake the worker and wait for a pass that started after this call (so it saw what is now)."""
        target = self.started + 1
        self.wake()
        async with self.done:
            await self.done.wait_for(lambda: self.finished >= target)
        return self.last_pass

    async def _reconcile_once(self) -> float:
        """One pass; how long to wait: the resync once settled, else a backoff doubling up to it."""
        try:
            with metrics.RECONCILE_SECONDS.labels(*self.key).time():
                settled = await self.reconcile()
            metrics.RECONCILES.labels(*self.key, "ok").inc()
        except Exception:
            settled = False
            metrics.RECONCILES.labels(*self.key, "error").inc()
            logger.exception("reconciling TritonServer %s failed; retrying in %.1fs", self.label, self.retry_seconds)
        if settled:
            self.retry_seconds = self.settings.retry_seconds
            until_resync = self.until_resync()
            return min(until_resync, self.settings.rollout_poll_seconds) if self.rolling_out else until_resync
        delay, self.retry_seconds = self.retry_seconds, min(self.retry_seconds * 2, self.settings.resync_seconds)
        return delay

    def until_resync(self) -> float:
        """The time to this server's next point in the resync period (at most one period away)."""
        period = self.settings.resync_seconds
        return period - (time.monotonic() - self.resync_phase) % period

    async def reconcile(self) -> bool:
        """One pass: observe, plan, execute the plan, conclude from what it reported, execute the verdicts.
        False when an action was not applied (a pod without an address, one that did not answer or is
        still syncing, an object or status the API server did not take): the worker tries again sooner."""
        seen = await self.observe()
        plan = self.plan_pass(seen)
        executed = await self.execute(plan.actions)
        self.last_pass = executed.this_pass  # a pass that synced no pod saw none
        verdicts = await self.conclude(seen, plan, executed)
        self.left = plan.held + executed.unapplied + (await self.execute(verdicts)).unapplied
        self.statuses.settle(not any(entry.startswith("write the status") for entry in self.left))
        self.rolling_out = plan.rollouts is not None and plan.rollouts.in_flight
        synced = plan.rollouts is not None
        if synced and any(p.placement is not None and p.placement.target == self.key[1] for p in seen.guests):
            self.moving(self.key[0])  # placement names this server once it serves them
        return not self.left

    async def observe(self) -> Seen:
        """The server and its models as indexed, rendered where they changed, and the keys (read, or made
        where missing: a key is what the pods are synced with)."""
        models = self.parses.models_of(self.indexes.models_of(self.key))
        # A model placed by its serverSelector is served here, or only loaded while it moves in or drains
        # out: then the server it serves on writes its status and runs its rollouts.
        hosted: list[ParsedModel] = []
        guests: list[ParsedModel] = []
        for parsed in models:
            placed = parsed.model is not None and parsed.model.spec.server_selector is not None
            (
                guests if placed and (parsed.placement is None or parsed.placement.server != self.key[1]) else hosted
            ).append(parsed)
        server_body = self.indexes.server(self.key)
        server, server_findings = self.parses.server_of(server_body)
        made = self.statuses.autoscaling(server_body)  # kept as it is while the server is refused
        inline = any(
            p.model is not None and p.model.spec.server is not None and p.model.name == self.key[1] for p in models
        )
        outcome = ServerOutcome(findings=server_findings, missing=server_body is None)
        if server is None and not inline:
            return Seen(hosted, guests, models, server_body, outcome, made)
        fleet, rendered = await self._render(server, models)
        made_yet = bool(rendered.server.metadata.uid)  # an inline server's children are owned by it
        keys = await self.children.secrets.keys(rendered, bool(self.last_pass.key_refused)) if made_yet else None
        outcome = ServerOutcome(findings=[*server_findings, *fleet.findings])
        deployed = await self.children.deployment()
        return Seen(hosted, guests, models, server_body, outcome, made, rendered, fleet, keys, made_yet, deployed)

    def plan_pass(self, seen: Seen) -> Plan:
        """What this pass does before it judges; nothing here calls the API."""
        rendered = seen.rendered
        if rendered is None or seen.fleet is None:
            return Plan(seen.outcome)
        writes, manifest_findings = self.children.changed(rendered, seen.keys, seen.deployed)
        if not seen.made_yet:
            writes = [write for write in writes if write[0]["kind"] == "TritonServer"]
        plan = Plan(replace(seen.outcome, findings=[*seen.outcome.findings, *manifest_findings]))
        if plan.outcome.server_errors or seen.keys is None:
            plan.actions += [ApplyChildren(writes)] if writes else []
            plan.held += [] if seen.keys is not None else ["sync the pods: their control key is not known yet"]
            return plan
        namespace = self.key[0]
        unwanted = unwanted_autoscaler(rendered.server, seen.made)  # deleted before its successor is applied
        if unwanted is not None:
            delete = Delete(unwanted[0], namespace, unwanted[1], "the spec no longer asks for it")
            plan.actions.append(delete)
            plan.unwanted_autoscaler = str(delete)
        if (policy := self.children.unwanted_policy(rendered)) is not None:
            plan.actions.append(Delete("NetworkPolicy", namespace, policy, "the spec turned it off"))
        desired, keep, self.last_good = desired_models(rendered, seen.models, seen.fleet.refused, self.last_good)
        rollouts, started = self.rollouts.plan(
            seen.hosted, self.statuses.rollouts(seen.hosted), rendered, desired, self.indexes.pods_of(self.key)
        )
        plan.rollouts = rollouts
        managed = self.statuses.managed_models(seen.server_body)
        first_load = first_load_probes(seen.models, rendered.server.spec.rollout)
        plan.actions += [
            *([ApplyChildren(writes)] if writes else []),
            SyncPods(
                rollouts.desired, keep | rollouts.keep, managed, seen.keys[CONTROL_KEY], rollouts.canary, first_load
            ),
            Probe(rollouts),
            ReadAutoscaler(rendered.server),
            ReadMemory(rendered),
            *self.children.told,
            *started,
        ]
        self.children.told = []
        return plan

    async def conclude(self, seen: Seen, plan: Plan, executed: Executed) -> list[Any]:
        """The verdicts of what the execution reported: rollouts judged and their revisions kept, the
        batching verdicts, the statuses that changed and the Events to tell; nothing here calls the API."""
        verdicts: list[Any] = []
        this_pass, rendered = executed.this_pass, seen.rendered
        if plan.rollouts is not None:
            judged = self.rollouts.judge(
                plan.rollouts, seen.hosted, this_pass.reports, this_pass.statistics, executed.answers
            )
            if judged:
                self.wake()  # a promotion or a rollback: the pods change in the next pass
            verdicts += [*judged, *self.rollouts.keeping(plan.rollouts, seen.hosted)]
        synced = plan.rollouts is not None  # the pods were synced: a pass the server's errors or a key held did not
        if synced and rendered is not None:
            gone = self.batching.judge(rendered, this_pass)
            metrics.export_batching(*self.key, self.batching.summaries(), gone=gone)
        outcome = self._with_children(plan.outcome)
        # An autoscaler whose delete was not taken stays named, so that the next pass deletes it again.
        kept_named = not synced or plan.unwanted_autoscaler in executed.unapplied
        autoscaling = seen.made if kept_named else executed.autoscaling
        verdicts += await self.statuses.patches(
            seen.hosted,
            seen.server_body,
            rendered,
            this_pass,
            outcome,
            autoscaling,
            self.batching if synced else None,
            plan.rollouts.records if plan.rollouts is not None else None,
            self.memory.figures() if synced else None,
        )
        if synced:
            self.statuses.warn(seen.hosted, outcome)
        verdicts += [*self.statuses.events, *self.children.told]
        self.statuses.events, self.children.told = [], []
        return verdicts

    async def execute(self, actions: list[Any]) -> Executed:
        """The one place a pass acts: each action in order (the children's writes alongside the pods'
        sync, which does not wait for them); what it could not apply is reported, never raised."""
        executed = Executed()
        told = [action for action in actions if isinstance(action, Event)]
        events.post(told)
        applying = [action for action in actions if isinstance(action, ApplyChildren)]
        for action in actions:  # deletes come first in a plan: an autoscaler goes before its successor is applied
            done = True
            if isinstance(action, Delete):
                done = await self.children.delete(action)
            elif isinstance(action, KeepRevision):
                done = await self.rollouts.keep(action)
            elif isinstance(action, PatchStatus):
                done = await self.statuses.patch(action)
            if not done:
                executed.unapplied.append(str(action))
        sync = next((action for action in actions if isinstance(action, SyncPods)), None)
        async with asyncio.TaskGroup() as group:  # pods get models over the control API, not from these objects
            writing = [group.create_task(self.children.apply(action.writes)) for action in applying]
            if sync is not None:
                syncing = group.create_task(
                    self.pods.sync(
                        sync.desired, sync.keep, sync.managed, sync.control_key, sync.canary, sync.first_load
                    )
                )
        executed.unapplied += [str(action) for action, task in zip(applying, writing, strict=True) if not task.result()]
        if sync is None:
            return executed
        executed.this_pass = syncing.result()
        if not executed.this_pass.settled:
            executed.unapplied.append(str(sync))
        for action in actions:
            if isinstance(action, Probe):
                executed.answers = await self.prober.probe(action.rollouts, self.indexes.pods_of(self.key))
            elif isinstance(action, ReadAutoscaler):
                executed.autoscaling, read = await self.autoscaler.status(action.server)
                if not read:
                    executed.unapplied.append(str(action))
            elif isinstance(action, ReadMemory):
                await self.memory.read(action.rendered, executed.this_pass)
        return executed

    def _with_children(self, outcome: ServerOutcome) -> ServerOutcome:
        """The pass's outcome with the children's names taken, the writes refused and the key Secrets' problems."""
        problems = tuple(self.children.secrets.problems.values())
        refused = tuple(self.children.refused.values())
        return replace(outcome, taken=tuple(self.children.names_taken), refused=refused, key_problems=problems)

    async def _render(self, server: TritonServer | None, models: list[ParsedModel]) -> tuple[Fleet, RenderedServer]:
        """The pure pass over this server and its models that are not being deleted; a model rendered
        from the same inputs before is not rendered again (kept.py)."""
        active = [p.model for p in models if p.model is not None and not p.deleting]
        files_from = {m.spec.files.config_map_ref.name for m in active if m.spec.files}
        config_maps = await self.files.of(self.indexes, self.key[0], files_from)
        placed = {(self.key[0], m.name): self.key[1] for m in active if m.spec.server_selector is not None}
        fleet = plan_fleet(
            [server] if server else [], active, config_maps, render=self.renderings.for_pass(), placed=placed
        )
        rendered = next(
            s for s in fleet.servers if (s.server.metadata.namespace or DEFAULT_NAMESPACE, s.server.name) == self.key
        )
        return fleet, rendered
