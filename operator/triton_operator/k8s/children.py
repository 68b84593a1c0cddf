"""A server's children, written by its worker: the control-key Secret, the child TritonServer of an
inline server, the Deployment, the Service and the models' config ConfigMaps.

Objects are written only when what was rendered changed since this worker last wrote them, so a
quiet pass makes no API calls; a resync forgets what was written, so a deleted child comes back.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import secrets
from collections.abc import Mapping
from typing import Any

import aiohttp

from ..api.validation import Finding
from ..render import manifests
from ..render.fleet import RenderedServer, model_config_maps, server_objects
from ..render.schema import check_manifests
from .api import ApiError, KubernetesApi
from .state import Indexes, ServerKey, digest

logger = logging.getLogger(__name__)

Write = tuple[dict[str, Any], str]  # an object and the digest of its content


class Children:
    """Writes a server's children and remembers what it wrote."""

    def __init__(self, key: ServerKey, indexes: Indexes, api: KubernetesApi):
        self.key = key
        self.indexes = indexes
        self.api = api
        self.applied: dict[str, str] = {}  # Kind/name -> digest of what was last applied
        self.deployed: dict[str, Any] | None = None  # the Deployment as last applied (or read once): its /dev/shm size is kept
        self.key_read: str | None = None  # the control key, as read from its Secret

    @property
    def label(self) -> str:
        return f"{self.key[0]}/{self.key[1]}"

    async def control_key(self, rendered: RenderedServer, read_again: bool) -> str:
        """The Secret's key: created once, reused ever after (never rotated by accident); read once,
        and again when asked (after a pass in which a pod did not answer)."""
        if self.key_read is None or read_again:
            self.key_read = await self._read_control_key(rendered)
        return self.key_read

    async def _read_control_key(self, rendered: RenderedServer) -> str:
        namespace, _ = self.key
        name = manifests.control_secret_name(rendered.server)
        secret = await self.api.get("Secret", namespace, name)
        if secret is None:
            try:
                secret = await self.api.create(manifests.control_secret(rendered.server, secrets.token_urlsafe(32)))
            except ApiError as error:
                if error.status != 409:
                    raise
                secret = await self.api.get("Secret", namespace, name)  # made meanwhile: use that key
        assert secret is not None
        return base64.b64decode(secret["data"][manifests.CONTROL_SECRET_KEY]).decode()

    async def changed(self, rendered: RenderedServer) -> tuple[list[Write], list[Finding]]:
        """The children that changed since last written (the Secret is the control key's, never
        applied over), and the findings of those the Kubernetes schema refuses."""
        namespace, name = self.key
        if self.deployed is None:
            self.deployed = await self.api.get("Deployment", namespace, name)
        objects = [
            *(obj for obj in server_objects(rendered, None, self.deployed) if obj["kind"] != "Secret"),
            *model_config_maps(rendered.models),
        ]
        writes, findings = [], []
        for obj in objects:
            obj["metadata"]["namespace"] = namespace
            fingerprint = digest(obj)
            if self.applied.get(_where(obj)) == fingerprint:
                continue
            problems = check_manifests([obj])
            if problems:
                findings += problems
            elif obj["kind"] == "ConfigMap" and self._config_map_current(obj):
                self.applied[_where(obj)] = fingerprint
            else:
                writes.append((obj, fingerprint))
        return writes, findings

    async def apply(self, writes: list[Write]) -> bool:
        """Write each object; one the API server refuses or does not answer is logged and written again
        next pass (False), and never stops the others or the pods' sync."""
        written = True
        for obj, fingerprint in writes:
            try:
                await self.api.apply(obj)
            except (ApiError, aiohttp.ClientError, asyncio.TimeoutError) as error:
                logger.warning("writing %s of TritonServer %s failed: %s", _where(obj), self.label, error)
                written = False
                continue
            self.applied[_where(obj)] = fingerprint
            if obj["kind"] == "Deployment":
                self.deployed = obj
        return written

    def forget(self) -> None:
        """Before a resync: the Deployment, Service and child TritonServer are read and applied again
        (server-side apply of an unchanged object changes nothing); a config ConfigMap is
        remembered only while it still exists."""
        namespace, _ = self.key
        self.deployed = None
        self.applied = {
            where: fingerprint
            for where, fingerprint in self.applied.items()
            if where.startswith("ConfigMap/") and self.indexes.config_map(namespace, where.split("/", 1)[1]) is not None
        }

    def _config_map_current(self, obj: Mapping[str, Any]) -> bool:
        existing = self.indexes.config_map(self.key[0], obj["metadata"]["name"])
        return existing is not None and existing.get("data") == obj.get("data")


def _where(obj: Mapping[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"
