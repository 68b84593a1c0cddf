"""What a pass found, as statuses: the status of a server and of each of its models that changed
(decide/status_content.py computes what they say), and a Warning Event when a model's errors or its load
failures change. The pass's execute writes them (patch); what was written and not yet indexed is the
operator's Expectations, read back here so that a pass never judges from a status older than its own."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ...api.status_fields import AutoscalingStatus, MemoryStatus, RolloutStatus, TritonServerStatus
from ...decide import conditions as c
from ...decide.batching_verdict import BatchingJudge
from ...decide.seen import ParsedModel, Pass, ServerKey, ServerOutcome
from ...decide.status_content import ModelOutcome, memory_figure, model_status, server_status
from ...memory.attribution import MeasuredMemory
from ...render.fleet import RenderedServer
from ..actions import PatchStatus
from ..api import API_FAILURES, KubernetesApi, failure
from ..events import Event
from ..expectations import Expectations, Written
from ..process import metrics

logger = logging.getLogger(__name__)

MODEL_STATES = ("Ready", "Loading", "Failed", "Invalid")  # ModelOutcome.state, each a gauge
# The Warning Event of a model that read ready on a pod but failed every request there (and was reloaded).
FAILING_EVERY_REQUEST = "FailingEveryRequest"
# Models whose status is judged between two hand-backs of the event loop. Judging is CPU only, and every
# server's resync judges all its models: without a hand-back, an edit to a model of another server would
# wait for a whole server's judging at each step it takes through the loop (bench/RESULTS.md,
# "Measurements behind the design").
JUDGED_AT_ONCE = 64


class StatusWriter:
    """Computes the statuses that changed and remembers the errors it last warned of, so nothing is
    written or told twice."""

    def __init__(self, key: ServerKey, api: KubernetesApi, expectations: Expectations | None = None):
        self.key = key
        self.api = api
        self.expectations = expectations or Expectations()
        self.events: list[Event] = []  # the Warning Events of the statuses computed since the pass took them
        self.warned: dict[tuple[str, str], str] = {}  # (model uid, Event reason) -> the message last sent
        # model uid -> what its status was computed from in a pass that found it as it should be: the same
        # inputs give the same status (its conditions' times change only with them), so it is not computed again
        self.unchanged: dict[str, tuple[Any, ...]] = {}
        self.memory_exported: dict[str, MemoryStatus] = {}  # the models' memory gauges as set: set again on change
        # What the last pass judged its models from, when it found every status as it should be: a pass that
        # sees the same (the same parses and renderings, an equal Pass) judges none of them again.
        self.quiet: tuple[Any, ...] | None = None
        self.judged: tuple[Any, ...] | None = None  # what this pass judged from: quiet once its writes are taken

    def _written(self, body: Mapping[str, Any]) -> Written:
        return Written(body.get("kind", ""), self.key[0], body.get("metadata", {}).get("name", ""), "status")

    def _pending(self) -> bool:
        """A status this worker wrote that the index has not shown yet."""
        return any(what[2] == self.key[1] for what in self.expectations.of(self.key[0], "status").values())

    def as_written(self, body: dict[str, Any]) -> dict[str, Any]:
        """The object with the status this worker last wrote. Status is the operator's, and the index may
        not have seen that write yet: reading it older would restart conditions' transition times and
        write the same status twice. A model's placement is the placement task's (k8s/placer.py), so it
        is read from the index as it stands."""
        if not self.expectations.any_of("status"):
            return body
        uid = body.get("metadata", {}).get("uid", "")
        expected = self.expectations.expected(self._written(body))
        if expected is None or expected[0] != uid:
            return body
        written = expected[1]  # (uid, status, the server whose worker wrote it)
        status = body.get("status") or {}
        if _own_part(status) == _own_part(written):  # the index has seen the write: its copy is the one kept
            self.expectations.seen(self._written(body))
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

    async def patches(
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
    ) -> list[PatchStatus]:
        """Every model's status, then the server's (when it exists), each only when it changed.
        `rollouts`: the canary models' rollout state, by model uid; `measured`: the memory measured on
        the pods, by Triton model."""
        present = {parsed.uid for parsed in models}
        if server_body is not None:
            present.add(server_body["metadata"].get("uid"))
        for written, (uid, _, server) in self.expectations.of(self.key[0], "status").items():
            if server == self.key[1] and uid not in present:  # gone, or no longer this server's
                self.expectations.seen(written)
        self.unchanged = {uid: inputs for uid, inputs in self.unchanged.items() if uid in present}
        patches = await self._model_patches(
            models, rendered, this_pass, outcome, batching, rollouts or {}, measured or {}
        )
        return patches + self._server_patch(server_body, rendered, this_pass, outcome, autoscaling)

    def settle(self, all_written: bool) -> None:
        """After the pass wrote its statuses: when all were taken and none is pending, the next pass that
        sees the same judges nothing again."""
        self.quiet = self.judged if all_written and not self._pending() else None

    async def _model_patches(
        self,
        models: Sequence[ParsedModel],
        rendered: RenderedServer | None,
        this_pass: Pass,
        outcome: ServerOutcome,
        batching: BatchingJudge | None,
        rollouts: Mapping[str, RolloutStatus],
        measured: Mapping[str, MeasuredMemory],
    ) -> list[PatchStatus]:
        namespace, server = self.key
        verdicts = batching.verdicts if batching else None
        self.judged = (tuple(models), rendered, this_pass, outcome, verdicts, rollouts, measured)
        if self.quiet == self.judged and not self._pending():
            return []
        states = dict.fromkeys(MODEL_STATES, 0)
        figures: dict[str, MemoryStatus] = {}  # TritonModel name -> its figure
        patches = []
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
            else:
                patches.append(PatchStatus(body, status))
        for state, count in states.items():
            metrics.MODELS.labels(namespace, server, state).set(count)
        changed = {name: figure for name, figure in figures.items() if self.memory_exported.get(name) != figure}
        metrics.export_model_memory(namespace, server, changed, self.memory_exported.keys() - figures.keys())
        self.memory_exported = figures
        return patches

    def _server_patch(
        self,
        server_body: dict[str, Any] | None,
        rendered: RenderedServer | None,
        this_pass: Pass,
        outcome: ServerOutcome,
        autoscaling: AutoscalingStatus | None,
    ) -> list[PatchStatus]:
        if server_body is None:
            return []
        namespace, name = self.key
        server_body = self.as_written(server_body)
        status = server_status(server_body, rendered, this_pass, outcome, autoscaling)
        metrics.SERVER_REPLICAS.labels(namespace, name).set((server_body.get("spec") or {}).get("replicas", 1))
        metrics.SERVER_READY_REPLICAS.labels(namespace, name).set(status.get("readyReplicas") or 0)
        return [] if status == server_body.get("status") else [PatchStatus(server_body, status)]

    async def patch(self, action: PatchStatus) -> bool:
        """Write a status (the pass's execute calls it); False when the API server did not take it."""
        body, status = action.body, action.status
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
        self.expectations.expect(self._written(body), (body["metadata"]["uid"], status, self.key[1]))
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
            self.events.append(Event(parsed.body, "Warning", reason, message))
        self.warned[(parsed.uid, reason)] = message


def _own_part(status: Mapping[str, Any]) -> dict[str, Any]:
    """A status without what the placement writes (placement, the Placed condition)."""
    conditions = [condition for condition in status.get("conditions") or [] if condition.get("type") != c.PLACED]
    return {**{key: value for key, value in status.items() if key != "placement"}, "conditions": conditions}
