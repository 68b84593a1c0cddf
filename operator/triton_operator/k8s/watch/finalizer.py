"""The TritonModel finalizer, kept by the operator: added at a model's first event, taken away once no
pod holds the model (or the finalizer timeout has passed, with a Warning Event saying why: pods that do
not answer, or a release that kept failing, a model whose spec or status does not read among its causes).

kopf would keep it for an on.delete handler, and with it its own annotations on every model: the spec
it last handled, written once for each new model and again after each edit. Every kopf handler here
is an event handler, for which kopf keeps nothing on the objects, so a new model costs the API server
two writes: this finalizer and the model's status.

Both writes are merge patches of `metadata.finalizers` at the resourceVersion they were made from
(KubernetesApi.set_finalizers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from ...api.types import GROUP
from ...decide.seen import ParsedModel
from .. import events
from ..api import KubernetesApi, failure
from ..process.settings import Settings
from ..server.workers import Workers
from .indexes import model_server_keys, section

logger = logging.getLogger(__name__)

FINALIZER = f"{GROUP}/finalizer"


class Finalizer:
    """Adds the finalizer to models that lack it, and runs one release per model being deleted."""

    def __init__(self, api: KubernetesApi, workers: Workers, settings: Settings):
        self.api = api
        self.workers = workers
        self.settings = settings
        self.latest: dict[str, Mapping[str, Any]] = {}  # uid -> the model as last listed, while it is being released
        self.releasing: dict[str, asyncio.Task[None]] = {}  # uid -> its release

    async def model_event(self, body: Mapping[str, Any], event_type: str | None) -> None:
        meta = body.get("metadata") or {}
        uid = meta.get("uid", "")
        finalizers = list(meta.get("finalizers") or [])
        if event_type == "DELETED":
            await self._forget(uid)
        elif meta.get("deletionTimestamp"):
            if FINALIZER in finalizers:
                self.latest[uid] = body
                if uid not in self.releasing or self.releasing[uid].done():
                    self.releasing[uid] = asyncio.get_running_loop().create_task(
                        self._release(uid), name=f"triton-operator release {meta.get('name')}"
                    )
        elif FINALIZER not in finalizers:
            await self.api.set_finalizers("TritonModel", meta, [*finalizers, FINALIZER])

    async def _release(self, uid: str) -> None:
        """Unload the model from every pod (a pass of each of its servers' workers), then take the finalizer
        away. The finalizer timeout bounds the wait whatever happens in it (pods that never answer, a pass or
        a read of the model that fails, tried again meanwhile): the finalizer then goes, with a Warning Event
        saying why the model may still be loaded."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        why = await self._unloaded(uid, started + self.settings.finalizer_timeout_seconds)
        body = self.latest[uid]
        if why:
            message = f"released after {loop.time() - started:.0f}s: {why}"
            logger.warning("TritonModel %s %s", section(body, "metadata").get("name"), message)
            events.post([events.Event(body, "Warning", "UnloadTimedOut", message)])
        while True:
            body = self.latest[uid]
            if await self.api.set_finalizers(
                "TritonModel", body["metadata"], [f for f in body["metadata"].get("finalizers") or [] if f != FINALIZER]
            ):
                return
            await asyncio.sleep(self.settings.retry_seconds)  # its next event brings the version to write at

    async def _unloaded(self, uid: str, deadline: float) -> str:
        """Why the model may still be loaded when the deadline came; empty once no pod holds it."""
        why = "no pass of its servers ended within the finalizer timeout"
        try:
            async with asyncio.timeout_at(deadline):
                while True:
                    model = section(self.latest[uid], "metadata").get("name")
                    try:
                        name = ParsedModel.of(self.latest[uid]).loaded_name
                        holding = await self._holding(uid, name)
                        if not holding:
                            return ""
                        why = f"'{name}' may still be loaded on pods {', '.join(holding)}"
                        logger.info("TritonModel %s: %s", model, why)
                    except Exception as error:  # whatever it is, tried again until the timeout
                        why = f"following its unload failed ({failure(error)}); it may still be loaded"
                        logger.warning("TritonModel %s, deleted: %s", model, why, exc_info=True)
                    await asyncio.sleep(self.settings.retry_seconds)
        except TimeoutError:
            return why

    async def _holding(self, uid: str, name: str) -> list[str]:
        """The pods that may still hold the model, after a pass of each server it is on (one placed by a
        serverSelector may be on two while it moves; on none before it is placed)."""
        pods = []
        for key in model_server_keys(self.latest[uid]):
            pods += (await self.workers.get(key).next_pass()).loaded_on(name)
        return pods

    async def _forget(self, uid: str) -> None:
        self.latest.pop(uid, None)
        task = self.releasing.pop(uid, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def stop(self) -> None:
        for uid in list(self.releasing):
            await self._forget(uid)
