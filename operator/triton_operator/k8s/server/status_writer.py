"""Writing what a pass found: the statuses of a server and its models (decide/status_content.py computes them) and
a Warning Event when a model's errors or its load failures change."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import kopf

from ...api.status_fields import AutoscalingStatus, MemoryStatus, RolloutStatus, TritonServerStatus
from ...decide import conditions as c
from ...decide.batching_verdict import BatchingJudge
from ...decide.seen import ParsedModel, Pass, ServerKey, ServerOutcome
from ...decide.status_content import ModelOutcome, memory_figure, model_status, server_status
from ...memory.attribution import MeasuredMemory
from ...render.fleet import RenderedServer
from ..api import API_FAILURES, KubernetesApi, failure
from ..process import metrics
from ..watch.indexes import event_subject

logger = logging.getLogger(__name__)

MODEL_STATES = ("Ready", "Loading", "Failed", "Invalid")  # ModelOutcome.state, each a gauge
# The Warning Event of a model that read ready on a pod but failed every request there (and was reloaded).
FAILING_EVERY_REQUEST = "FailingEveryRequest"
# Models whose status is judged between two hand-backs of the event loop. Judging is CPU only (about
# 25 us a model), and every server's resync judges all its models: without a hand-back, an edit to a
# model of another server would wait for a whole server's judging (8 ms at 333 models) at each step it
# takes through the loop.
JUDGED_AT_ONCE = 64


class StatusWriter:
    """Remembers the statuses it wrote and the errors it last warned of, so nothing is written twice."""

    def __init__(self, key: ServerKey, api: KubernetesApi):
        self.key = key
        self.api = api
        self.written: dict[str, dict[str, Any]] = {}  # uid -> the status this worker last wrote, until the index has it
        self.warned: dict[tuple[str, str], str] = {}  # (model uid, Event reason) -> the message last sent
        # model uid -> what its status was computed from in a pass that found it as it should be: the same
        # inputs give the same status (its conditions' times change only with them), so it is not computed again
        self.unchanged: dict[str, tuple[Any, ...]] = {}
        self.memory_exported: dict[str, MemoryStatus] = {}  # the models' memory gauges as set: set again on change
        # What the last pass judged its models from, when it found every status as it should be: a pass that
        # sees the same (the same parses and renderings, an equal Pass) judges none of them again.
        self.quiet: tuple[Any, ...] | None = None

    def as_written(self, body: dict[str, Any]) -> dict[str, Any]:
        """The object with the status this worker last wrote. Status is the operator's, and the index may
        not have seen that write yet: reading it older would restart conditions' transition times and
        write the same status twice. A model's placement is the placement task's (k8s/placer.py), so it
        is read from the index as it stands."""
        uid = body.get("metadata", {}).get("uid", "")
        written = self.written.get(uid)
        if written is None:
            return body
        status = body.get("status") or {}
        if _own_part(status) == _own_part(written):  # the index has seen the write: its copy is the one kept
            del self.written[uid]
            return body
        placed = [condition for condition in status.get("conditions") or [] if condition.get("type") == c.PLACED]
        mine = {**written, "conditions": [*(_own_part(written).get("conditions") or []), *placed]}
        if "placement" in status:
            mine["placement"] = status["placement"]
        return {**body, "status": mine}

    def managed_models(self, server_body: dict[str, Any] | None) -> set[str]:
        """The Triton models the operator loaded on this server's pods, as its status last said."""
        return set(self._server_status(server_body).managed_models)

    def rollouts(self, models: Sequence[ParsedModel]) -> dict[str, RolloutStatus | None]:
        """Each model's canary rollout as its status last said, by model uid."""
        written = {parsed.uid: (self.as_written(parsed.body).get("status") or {}).get("rollout") for parsed in models}
        return {uid: RolloutStatus.model_validate(rollout) if rollout else None for uid, rollout in written.items()}

    def autoscaling(self, server_body: dict[str, Any] | None) -> AutoscalingStatus | None:
        """The autoscaler the operator made for this server, as its status last said."""
        return self._server_status(server_body).autoscaling

    def _server_status(self, server_body: dict[str, Any] | None) -> TritonServerStatus:
        return TritonServerStatus.model_validate(self.as_written(server_body or {}).get("status") or {})

    async def write(
        self,
        models: Sequence[ParsedModel],
        server_body: dict[str, Any] | None,
        rendered: RenderedServer | None,
        this_pass: Pass,
        outcome: ServerOutcome,
        autoscaling: AutoscalingStatus | None,
        batching: BatchingJudge | None = None,
        rollouts: Mapping[str, RolloutStatus] | None = None,
        measured: Mapping[str, MeasuredMemory] | None = None,
    ) -> bool:
        """Every model's status, then the server's (when it exists); each written only when it changed.
        False when the API server did not take one: the worker then passes again soon (its backoff),
        not at the next resync. `rollouts`: the canary models' rollout state, by model uid; `measured`:
        the memory measured on the pods, by Triton model."""
        written = await self._write_model_statuses(
            models, rendered, this_pass, outcome, batching, rollouts or {}, measured or {}
        )
        written &= await self._write_server_status(server_body, rendered, this_pass, outcome, autoscaling)
        present = {parsed.uid for parsed in models}
        if server_body is not None:
            present.add(server_body["metadata"].get("uid"))
        self.written = {uid: status for uid, status in self.written.items() if uid in present}
        self.unchanged = {uid: inputs for uid, inputs in self.unchanged.items() if uid in present}
        return written

    async def _write_model_statuses(
        self,
        models: Sequence[ParsedModel],
        rendered: RenderedServer | None,
        this_pass: Pass,
        outcome: ServerOutcome,
        batching: BatchingJudge | None,
        rollouts: Mapping[str, RolloutStatus],
        measured: Mapping[str, MeasuredMemory],
    ) -> bool:
        namespace, server = self.key
        verdicts = batching.verdicts if batching else None
        judged_from = (tuple(models), rendered, this_pass, outcome, verdicts, rollouts, measured)
        if self.quiet == judged_from and not self.written:
            return True
        states = dict.fromkeys(MODEL_STATES, 0)
        figures: dict[str, MemoryStatus] = {}  # TritonModel name -> its figure
        written = True
        for index, parsed in enumerate(models):
            if index % JUDGED_AT_ONCE == JUDGED_AT_ONCE - 1:
                await asyncio.sleep(0)
            if parsed.deleting:
                continue
            result = ModelOutcome.of(parsed, self.key, rendered, this_pass, outcome)
            states[result.state] += 1
            self._warn_on_change(parsed, c.LOAD_FAILED, result.load_failure)
            self._warn_on_change(parsed, FAILING_EVERY_REQUEST, result.healed)
            name = result.rendered.name if result.rendered else None
            share = rendered.shm.share(name) if rendered and name else None
            verdict = batching.verdict(name) if batching and name else None
            body = self.as_written(parsed.body)
            rollout = rollouts.get(parsed.uid)
            memory = memory_figure(parsed.model, measured.get(name) if name else None)
            if memory is not None:
                figures[body["metadata"]["name"]] = memory
            inputs = (
                body.get("status"),
                body["metadata"].get("generation"),
                result,
                share.total_bytes if share else None,
                verdict,
                rollout,
                memory,
            )
            if self.unchanged.get(parsed.uid) == inputs:
                continue
            status = model_status(body, result, server, share.total_bytes if share else None, verdict, rollout, memory)
            if status == body.get("status"):
                self.unchanged[parsed.uid] = inputs
            written &= await self._patch_status(body, status)
        for state, count in states.items():
            metrics.MODELS.labels(namespace, server, state).set(count)
        changed = {name: figure for name, figure in figures.items() if self.memory_exported.get(name) != figure}
        metrics.export_model_memory(namespace, server, changed, self.memory_exported.keys() - figures.keys())
        self.memory_exported = figures
        self.quiet = judged_from if written and not self.written else None
        return written

    async def _write_server_status(
        self,
        server_body: dict[str, Any] | None,
        rendered: RenderedServer | None,
        this_pass: Pass,
        outcome: ServerOutcome,
        autoscaling: AutoscalingStatus | None,
    ) -> bool:
        if server_body is None:
            return True
        namespace, name = self.key
        server_body = self.as_written(server_body)
        status = server_status(server_body, rendered, this_pass, outcome, autoscaling)
        metrics.SERVER_REPLICAS.labels(namespace, name).set((server_body.get("spec") or {}).get("replicas", 1))
        metrics.SERVER_READY_REPLICAS.labels(namespace, name).set(status.get("readyReplicas") or 0)
        return await self._patch_status(server_body, status)

    async def _patch_status(self, body: dict[str, Any], status: dict[str, Any]) -> bool:
        """Write the status when it changed; False when the API server did not take it."""
        if status == body.get("status"):
            return True
        try:
            await self.api.patch_status(
                body["kind"], self.key[0], body["metadata"]["name"], status, replacing=body.get("status") or {}
            )
        except API_FAILURES as error:
            logger.warning(
                "writing the status of %s %s/%s failed: %s",
                body["kind"],
                self.key[0],
                body["metadata"]["name"],
                failure(error),
            )
            return False
        self.written[body["metadata"]["uid"]] = status
        return True

    def warn(self, models: Sequence[ParsedModel], outcome: ServerOutcome) -> None:
        """A Warning Event when a model's errors change (not on every pass)."""
        for parsed in models:
            errors = [f for f in [*parsed.findings, *outcome.for_model(parsed)] if f.severity == "error"]
            self._warn_on_change(parsed, c.INVALID_SPEC, "; ".join(f"{f.path}: {f.message}" for f in errors))

    def _warn_on_change(self, parsed: ParsedModel, reason: str, message: str) -> None:
        """A Warning Event with this reason when its message is new; an empty message sends none and
        lets the same message warn again once it comes back."""
        if message and self.warned.get((parsed.uid, reason)) != message:
            kopf.warn(event_subject(parsed.body), reason=reason, message=message[:1024])
        self.warned[(parsed.uid, reason)] = message


def _own_part(status: Mapping[str, Any]) -> dict[str, Any]:
    """A status without what the placement writes (placement, the Placed condition)."""
    conditions = [condition for condition in status.get("conditions") or [] if condition.get("type") != c.PLACED]
    return {**{key: value for key, value in status.items() if key != "placement"}, "conditions": conditions}
