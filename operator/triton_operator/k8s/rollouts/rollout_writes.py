"""Canary rollouts in a cluster, around decide/rollout_plan.py: reads each model's stable revision from
the ConfigMap the model owns (render/revisions.py), so a rollback loads it again exactly as it ran, even
when the change was an edit of the model's files ConfigMap; names that ConfigMap for writing and older
ones for deletion; and says each step (Events, metrics). The rollout's state is its model's
status.rollout and these ConfigMaps (as indexed, or as written and not yet indexed: Expectations)."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ...api.rollout_spec import effective_rollout, model_probe
from ...api.status_fields import RolloutStatus
from ...decide.rollout_plan import RolloutPlan
from ...decide.seen import ParsedModel, Pod, ServerKey
from ...protocol.desired import DesiredModel
from ...render.fleet import RenderedServer
from ...render.revisions import desired_from_config_map, revision_config_map, revision_config_map_name
from ...triton.batching import ModelStatistics
from ...triton.sync import ReplicaReport
from ..actions import Delete, KeepRevision
from ..api import API_FAILURES, KubernetesApi, failure
from ..events import Event
from ..expectations import Expectations, Written
from ..process import metrics
from ..watch.indexes import Indexes

logger = logging.getLogger(__name__)


class Rollouts:
    """A worker's canary rollouts: planned each pass from the models' status, judged after the sync, and
    their stable revisions' ConfigMaps kept."""

    def __init__(self, key: ServerKey, indexes: Indexes, api: KubernetesApi, expectations: Expectations):
        self.key = key
        self.indexes = indexes
        self.api = api
        self.expectations = expectations

    def plan(
        self,
        models: Sequence[ParsedModel],
        written: Mapping[str, RolloutStatus | None],
        rendered: RenderedServer,
        desired: Mapping[str, DesiredModel],
        pods: Sequence[Pod],
    ) -> tuple[RolloutPlan, list[Event]]:
        """Each canary model's state before the sync, from its rollout as last written (`written`, by
        model uid), and what every pod runs for it; an Event for each rollout that starts."""
        plan = RolloutPlan(dict(desired))
        events = []
        live = [pod.name for pod in pods if pod.address and not pod.deleting]
        in_service = [pod.name for pod in pods if pod.models_ready == "True" and pod.name in live]
        for parsed in models:
            model = parsed.model
            if model is None or parsed.deleting:
                continue
            candidate = desired.get(model.model_name)
            spec = effective_rollout(model.spec.rollout, rendered.server.spec.rollout)
            if candidate is None or spec.strategy != "Canary":
                continue
            previous = written.get(parsed.uid)
            stable = self._stable(model.name, model.model_name, previous, candidate)
            probe = model_probe(model.spec.rollout)
            rollout = plan.add(parsed.uid, model.model_name, spec, probe, candidate, previous, stable, in_service, live)
            if rollout is not None and rollout.started:
                events.append(Event(parsed.body, "Normal", "RolloutStarted", rollout.record.message))
        return plan, events

    def _revision(self, name: str) -> Written:
        return Written("ConfigMap", self.key[0], name, "revision")

    def _kept(self, object_name: str, model_name: str, revision: str) -> DesiredModel | None:
        """A revision as its ConfigMap keeps it: indexed, or written and not indexed yet."""
        name = revision_config_map_name(object_name, revision)
        config_map = self.indexes.config_map(self.key[0], name) or self.expectations.expected(self._revision(name))
        return desired_from_config_map(model_name, revision, config_map) if config_map is not None else None

    def _stable(
        self, object_name: str, model_name: str, record: RolloutStatus | None, candidate: DesiredModel
    ) -> DesiredModel | None:
        """The record's stable revision as it ran: the spec's own rendering, or its ConfigMap, loaded
        within the spec's load timeout (which no revision carries)."""
        if record is None or record.stable_revision == candidate.revision:
            return candidate
        stable = self._kept(object_name, model_name, record.stable_revision)
        return replace(stable, load_timeout_seconds=candidate.load_timeout_seconds) if stable else None

    def judge(
        self,
        plan: RolloutPlan,
        models: Sequence[ParsedModel],
        reports: Mapping[str, ReplicaReport],
        statistics: Mapping[str, Mapping[str, ModelStatistics]],
        answers: Mapping[str, Mapping[str, Sequence[str | None]]],
    ) -> list[Event]:
        """Judge every rollout in flight on what the sync saw and the probes' `answers` (by model uid): an
        Event for each promotion or rollback (the pods change in the next pass)."""
        decided = plan.judge(reports, statistics, datetime.datetime.now(tz=datetime.UTC), answers)
        bodies = {parsed.uid: parsed.body for parsed in models}
        events = []
        for uid, verdict in decided:
            namespace, server = self.key
            metrics.ROLLOUTS.labels(namespace, server, plan.models[uid].name, verdict.outcome).inc()
            metrics.ROLLOUT_BAKE_SECONDS.labels(namespace, server).observe(verdict.bake_seconds)
            kind, reason = (
                ("Normal", "RolloutPromoted") if verdict.outcome == "promoted" else ("Warning", "RolloutRolledBack")
            )
            logger.log(
                logging.INFO if kind == "Normal" else logging.WARNING,
                "TritonModel %s/%s: %s",
                namespace,
                bodies[uid]["metadata"]["name"],
                verdict.record.message,
            )
            events.append(Event(bodies[uid], kind, reason, verdict.record.message))
        return events

    def keeping(self, plan: RolloutPlan, models: Sequence[ParsedModel]) -> list[KeepRevision | Delete]:
        """Each stable revision's ConfigMap that is not there (new, or deleted by someone), and, where one
        is written, the one before the previous to delete: two revisions are kept."""
        namespace = self.key[0]
        actions: list[KeepRevision | Delete] = []
        for parsed in models:
            rollout = plan.models.get(parsed.uid)
            if rollout is None or parsed.model is None:
                continue
            record = rollout.record
            name = revision_config_map_name(parsed.model.name, record.stable_revision)
            if self.expectations.expected(self._revision(name)) or self.indexes.config_map(namespace, name):
                continue
            stable = self._stable(parsed.model.name, parsed.model.model_name, record, rollout.candidate)
            if stable is None:
                continue
            obj = revision_config_map(parsed.model, stable)
            obj["metadata"]["namespace"] = namespace
            actions.append(KeepRevision(obj))
            before = rollout.written
            older = before.previous_revision if before is not None else None
            if older is not None and older not in (record.stable_revision, record.previous_revision):
                name = revision_config_map_name(parsed.model.name, older)
                actions.append(Delete("ConfigMap", namespace, name, f"revision {older} is older than two kept"))
        return actions

    async def keep(self, action: KeepRevision) -> bool:
        """Write a stable revision's ConfigMap (the pass's execute calls it); False when it was not taken."""
        meta = action.config_map["metadata"]
        try:
            await self.api.apply(action.config_map)
        except API_FAILURES as error:
            logger.warning("%s of TritonServer %s/%s failed: %s", action, *self.key, failure(error))
            return False
        self.expectations.expect(self._revision(meta["name"]), action.config_map)
        return True

    def forget(self) -> None:
        """Before a resync: a kept revision's ConfigMap someone deleted is written again."""
        namespace = self.key[0]
        self.expectations.keep_only(
            "revision",
            lambda written, _: (
                written.namespace != namespace or self.indexes.config_map(namespace, written.name) is not None
            ),
        )
