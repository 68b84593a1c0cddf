"""Placement in the cluster: one task places the models with a serverSelector, a namespace at a time,
and writes where each runs into its status (`status.placement`, the Placed condition).

The status is the placement's only record: the models index reads it to give a placed model to the
workers of the servers it names (state.model_server_keys), and the next pass, after a restart too,
starts from it, so nothing is placed differently for having been read again. The decision is
render/moves.py's; this module observes (servers, models, their measured figures, which server serves
what: the workers' last passes) and writes.

A server that a placement names carries the finalizer PLACEMENT_FINALIZER: deleting it then leaves it
running until its models are loaded elsewhere and drained from it (make before break), instead of its
pods going with it while they still serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
from collections.abc import Mapping
from typing import Any

from ..api.parse import DEFAULT_NAMESPACE
from ..api.status_fields import MemoryStatus, PlacementStatus
from ..api.types import GROUP
from ..decide.seen import ParsedModel, parse_server
from ..decide.status_content import memory_figure, placement_status
from ..render.moves import TIME_FORMAT, UNSCHEDULABLE, ModelSeen, next_placements, placed_on, placement_servers
from ..render.placement import MemorySource, ServerRoom, demand_of, room_of
from . import events
from .api import API_FAILURES, KubernetesApi, failure
from .expectations import Written
from .process.settings import Settings
from .server.workers import Workers

logger = logging.getLogger(__name__)

PLACEMENT_FINALIZER = f"{GROUP}/placed-models"


def _finalizers(body: Mapping[str, Any]) -> list[str]:
    return list((body.get("metadata") or {}).get("finalizers") or [])


def _room(body: Mapping[str, Any]) -> ServerRoom:
    """A server as placement sees it; one refused for its errors takes nothing new (its pods run as they were)."""
    server, _ = parse_server(body)
    meta = body.get("metadata") or {}
    deleting = bool(meta.get("deletionTimestamp"))
    if server is None:
        replicas = (body.get("spec") or {}).get("replicas", 1)
        return ServerRoom(
            meta.get("namespace") or DEFAULT_NAMESPACE,
            meta.get("name", ""),
            meta.get("labels") or {},
            replicas,
            leaving=True,
        )
    return dataclasses.replace(room_of(server), leaving=deleting)


def _figure(parsed: ParsedModel) -> MemoryStatus | None:
    """What the model counts for: as its server's worker last wrote it (measured there), else from its spec."""
    written = (parsed.body.get("status") or {}).get("memory")
    return MemoryStatus.model_validate(written) if written else memory_figure(parsed.model, None)


def _seen(parsed: ParsedModel) -> ModelSeen | None:
    if parsed.model is None or parsed.deleting:
        return None
    demand = demand_of(parsed.model)
    figure = _figure(parsed)
    if figure is not None:
        demand = dataclasses.replace(
            demand, memory_bytes=figure.cpu_bytes, gpu_memory_bytes=figure.gpu_bytes, source=MemorySource(figure.source)
        )
    return ModelSeen(parsed.uid, demand, parsed.model.model_name, parsed.placement)


class Placer:
    """The placement task: started on the first change, one pass per namespace that changed."""

    def __init__(self, api: KubernetesApi, workers: Workers, settings: Settings):
        self.api = api
        self.workers = workers
        self.settings = settings
        self.dirty: set[str] = set()  # namespaces to place again
        self.wakeup = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.expectations = workers.expectations  # a placement written: (uid, resourceVersion written over, status)
        self.due: dict[str, float] = {}  # namespace -> when a drain or a hold ends there (loop time)
        self.passes = 0  # namespaces placed so far: what a test waits on
        workers.moving = self.changed

    def changed(self, namespace: str) -> None:
        """Something placement reads changed in the namespace: place it again soon."""
        self.dirty.add(namespace)
        self.wakeup.set()
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self.run(), name="triton-operator placement")

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self.wakeup.clear()
            now = loop.time()
            self.dirty |= {namespace for namespace, when in self.due.items() if when <= now}
            namespaces, self.dirty = sorted(self.dirty), set()
            for namespace in namespaces:
                self.due.pop(namespace, None)
                try:
                    again = await self.place(namespace)
                except Exception:
                    logger.exception(
                        "placing the models of namespace %s failed; trying again in %.1fs",
                        namespace,
                        self.settings.retry_seconds,
                    )
                    again = self.settings.retry_seconds
                self.passes += 1
                if again is not None:
                    self.due[namespace] = min(self.due.get(namespace, float("inf")), loop.time() + again)
            timeout = min(self.due.values(), default=now + self.settings.resync_seconds) - loop.time()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(timeout, 0)):
                    await self.wakeup.wait()

    async def place(self, namespace: str) -> float | None:
        """One pass over the namespace: decide, then write finalizers to add, statuses, finalizers to drop.
        How long until it must pass again by itself (a drain or a hold ends; a write was refused)."""
        indexes = self.workers.indexes
        if indexes is None:
            return None
        servers = indexes.servers_in(namespace)
        selected = [ParsedModel.of(self._as_written(body)) for body in indexes.selector_models.get(namespace, [])]
        if not selected and not any(PLACEMENT_FINALIZER in _finalizers(body) for body in servers):
            return None
        named = [
            ParsedModel.of(body)
            for server in servers
            for body in indexes.models_of((namespace, server["metadata"]["name"]))
            if "serverSelector" not in body.get("spec", {})
        ]
        seen = [model for parsed in [*named, *selected] if (model := _seen(parsed)) is not None]
        now = datetime.datetime.now(tz=datetime.UTC)
        decided, _ = next_placements(
            [_room(body) for body in servers],
            seen,
            self._serves,
            now,
            self.settings.move_hold_seconds,
            self.settings.move_drain_seconds,
        )
        needed = placed_on(decided)
        unmarked = await self._set_finalizers(servers, needed, add=True)
        written = not unmarked
        for parsed in selected:
            placement = decided.get(parsed.uid)
            if placement is None:
                continue
            if unmarked & set(placement_servers(placement)):  # named only once its server waits for it
                continue
            written &= await self._write(parsed, placement)
        if written:
            written = not await self._set_finalizers(servers, needed, add=False)
        return self._next_due(decided, now) if written else self.settings.retry_seconds

    def _next_due(self, decided: Mapping[str, PlacementStatus], now: datetime.datetime) -> float | None:
        """Seconds until the first drain or hold of these placements ends, when placement changes by itself."""
        ends = []
        for placement in decided.values():
            if placement.moved_at is None:
                continue
            moved = datetime.datetime.strptime(placement.moved_at, TIME_FORMAT).replace(tzinfo=datetime.UTC)
            for wait in (self.settings.move_drain_seconds, self.settings.move_hold_seconds):
                if (left := (moved - now).total_seconds() + wait) > 0:
                    ends.append(left + 1)  # past the second the status's time is rounded to
        return min(ends, default=None)

    def _serves(self, namespace: str, server: str, model_name: str) -> bool:
        entry = self.workers.running.get((namespace, server))
        return entry is not None and entry[0].last_pass.serves(model_name)

    def _as_written(self, body: dict[str, Any]) -> dict[str, Any]:
        """The model with the status this task last wrote, while the index has not seen that write."""
        meta = body["metadata"]
        written = Written("TritonModel", meta.get("namespace", ""), meta["name"], "placement")
        uid, version, status = self.expectations.expected(written) or (None, None, {})
        if uid == meta.get("uid") and version is not None and version == meta.get("resourceVersion"):
            return {**body, "status": status}
        self.expectations.seen(written)
        return body

    async def _write(self, parsed: ParsedModel, placement: PlacementStatus) -> bool:
        body = parsed.body
        old = body.get("status") or {}
        status = placement_status(body, placement, _figure(parsed) if placement.server is None else None)
        if status == old:
            return True
        meta = body["metadata"]
        try:
            await self.api.patch_status("TritonModel", meta.get("namespace", ""), meta["name"], status, replacing=old)
        except API_FAILURES as error:
            logger.warning(
                "writing the placement of TritonModel %s/%s failed: %s",
                meta.get("namespace"),
                meta["name"],
                failure(error),
            )
            return False
        self.expectations.expect(
            Written("TritonModel", meta.get("namespace", ""), meta["name"], "placement"),
            (meta.get("uid"), meta.get("resourceVersion"), status),
        )
        before = parsed.placement
        if placement != before:
            logger.info(
                "TritonModel %s/%s: %s",
                meta.get("namespace"),
                meta["name"],
                placement.message or f"placed on {placement.server}",
            )
        if placement.reason != (
            before.reason if before else None
        ):  # an Event as each step happens, as a Pod's scheduling has
            kind = "Warning" if placement.reason == UNSCHEDULABLE else "Normal"
            message = placement.message or f"on TritonServer {placement.server}"
            events.post([events.Event(body, kind, placement.reason, message)])
        return True

    async def _set_finalizers(self, servers: list[dict[str, Any]], needed: set[str], add: bool) -> set[str]:
        """Add the finalizer to each server a placement names (`add`), or take it from those none names;
        the servers where that was not done."""
        failed = set()
        for body in servers:
            meta = body["metadata"]
            finalizers = _finalizers(body)
            has, wanted = PLACEMENT_FINALIZER in finalizers, meta["name"] in needed
            if has == wanted or wanted != add:
                continue
            changed = [*finalizers, PLACEMENT_FINALIZER] if add else [f for f in finalizers if f != PLACEMENT_FINALIZER]
            if not await self.api.set_finalizers("TritonServer", meta, changed):
                failed.add(meta["name"])
        return failed

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
