"""Canary rollouts in a cluster: executes what decide/rollout_plan.py decides. It reads each model's
stable revision from the ConfigMap the model owns (render/revisions.py), so a rollback loads it again
exactly as it ran, even when the change was an edit of the model's files ConfigMap; writes that
ConfigMap and deletes older ones; and tells each step (Events, metrics)."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

import kopf

from ...api.rollout_spec import effective_rollout, model_probe
from ...api.status_fields import RolloutStatus
from ...decide.rollout_plan import RolloutPlan
from ...decide.seen import ParsedModel, Pod, ServerKey
from ...protocol.desired import DesiredModel
from ...render.fleet import RenderedServer
from ...render.revisions import desired_from_config_map, revision_config_map, revision_config_map_name
from ...triton.batching import ModelStatistics
from ...triton.sync import ReplicaReport
from ..api import API_FAILURES, KubernetesApi, failure
from ..process import metrics
from ..watch.indexes import Indexes, event_subject

logger = logging.getLogger(__name__)


class Rollouts:
    """A worker's canary rollouts: plans each pass from the models' status, judges after the sync,
    keeps the stable revisions' ConfigMaps, and tells (Events, metrics)."""

    def __init__(self, key: ServerKey, indexes: Indexes, api: KubernetesApi):
        self.key = key
        self.indexes = indexes
        self.api = api
        self.kept: dict[
            str, DesiredModel
        ] = {}  # revision ConfigMap name -> the stable revision it holds, as this worker knows it
        self.applied: set[str] = set()  # revision ConfigMaps written since the last resync (the index may lag behind)

    def plan(
        self,
        models: Sequence[ParsedModel],
        written: Mapping[str, RolloutStatus | None],
        rendered: RenderedServer,
        desired: Mapping[str, DesiredModel],
        pods: Sequence[Pod],
    ) -> RolloutPlan:
        """Each canary model's state before the sync, from its rollout as last written (`written`, by
        model uid), and what every pod runs for it."""
        plan = RolloutPlan(dict(desired))
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
                kopf.event(
                    event_subject(parsed.body), type="Normal", reason="RolloutStarted", message=rollout.record.message
                )
        return plan

    def _stable(
        self, object_name: str, model_name: str, record: RolloutStatus | None, candidate: DesiredModel
    ) -> DesiredModel | None:
        """The record's stable revision as it ran: the spec's own rendering, or its ConfigMap, loaded
        within the spec's load timeout (which no revision carries)."""
        if record is None or record.stable_revision == candidate.revision:
            return candidate
        name = revision_config_map_name(object_name, record.stable_revision)
        config_map = self.indexes.config_map(self.key[0], name)
        if (
            config_map is not None
            and (kept := desired_from_config_map(model_name, record.stable_revision, config_map)) is not None
        ):
            self.kept[name] = kept
        stable = self.kept.get(name)
        return replace(stable, load_timeout_seconds=candidate.load_timeout_seconds) if stable else None

    def judge(
        self,
        plan: RolloutPlan,
        models: Sequence[ParsedModel],
        reports: Mapping[str, ReplicaReport],
        statistics: Mapping[str, Mapping[str, ModelStatistics]],
        answers: Mapping[str, Mapping[str, Sequence[str | None]]],
    ) -> bool:
        """Judge every rollout in flight on what the sync saw and the probes' `answers` (by model uid);
        True when one's pods must change (a promotion or a rollback), so the worker passes again at once."""
        decided = plan.judge(reports, statistics, datetime.datetime.now(tz=datetime.UTC), answers)
        bodies = {parsed.uid: parsed.body for parsed in models}
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
            kopf.event(event_subject(bodies[uid]), type=kind, reason=reason, message=verdict.record.message[:1024])
        return bool(decided)

    async def keep_stable(self, plan: RolloutPlan, models: Sequence[ParsedModel]) -> bool:
        """Write each stable revision's ConfigMap that is not there (new, or deleted by someone) from
        what this worker holds of it, and delete the one before the previous when a new one is
        written; False when the API server did not take a write (the pass is tried again)."""
        written = True
        namespace = self.key[0]
        wanted: dict[str, DesiredModel] = {}
        for parsed in models:
            rollout = plan.models.get(parsed.uid)
            if rollout is None or parsed.model is None:
                continue
            record = rollout.record
            name = revision_config_map_name(parsed.model.name, record.stable_revision)
            stable = rollout.candidate if record.stable_revision == rollout.candidate.revision else self.kept.get(name)
            if stable is None:
                continue
            wanted[name] = stable
            if name in self.applied or self.indexes.config_map(namespace, name) is not None:
                continue
            obj = revision_config_map(parsed.model, stable)
            obj["metadata"]["namespace"] = namespace
            try:
                await self.api.apply(obj)
                self.applied.add(name)
            except API_FAILURES as error:
                logger.warning(
                    "keeping revision %s of TritonModel %s/%s failed: %s",
                    record.stable_revision,
                    namespace,
                    parsed.model.name,
                    failure(error),
                )
                written = False
            written &= await self._forget_older(parsed.model.name, rollout.written, record)
        self.kept = wanted
        return written

    def forget(self) -> None:
        """Before a resync: a kept revision's ConfigMap someone deleted is written again."""
        self.applied.clear()

    async def _forget_older(self, model: str, before: RolloutStatus | None, record: RolloutStatus) -> bool:
        """Two revisions are kept: the stable one and the one before it."""
        older = before.previous_revision if before is not None else None
        if older is None or older in (record.stable_revision, record.previous_revision):
            return True
        try:
            await self.api.delete("ConfigMap", self.key[0], revision_config_map_name(model, older))
        except API_FAILURES as error:
            logger.warning(
                "deleting revision %s of TritonModel %s/%s failed: %s", older, self.key[0], model, failure(error)
            )
            return False
        return True
