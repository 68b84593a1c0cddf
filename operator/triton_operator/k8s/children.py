"""A server's children, written by its worker: the key Secrets (the operator's control key and the
sidecars' shared-memory key), the child TritonServer of an inline server, the Deployment, the
Service, the NetworkPolicy, the autoscaler and the models' config ConfigMaps.

Each key is kept, never silently replaced: a deleted Secret is made again with the key the operator
holds (Event ControlKeyRecreated), and a key other than the running pods' rolls them, as its digest
is in the pod template (Event ControlKeyRotated).

Objects are written only when what was rendered changed since this worker last wrote them, so a
quiet pass makes no API calls; a resync forgets what was written, so a deleted child comes back.
"""

from __future__ import annotations

import base64
import logging
import secrets
from collections.abc import Mapping
from typing import Any

import kopf

from ..api.validation import Finding
from ..render import manifests
from ..api.server import NetworkPeer
from ..render.fleet import RenderedServer, model_config_maps, server_objects
from ..render.schema import check_manifests
from .api import API_FAILURES, ApiError, KubernetesApi, failure
from .state import Indexes, ServerKey, config_map_digest, digest

logger = logging.getLogger(__name__)

Write = tuple[dict[str, Any], str]  # an object and the digest of its content


class Children:
    """Writes a server's children and remembers what it wrote."""

    def __init__(self, key: ServerKey, indexes: Indexes, api: KubernetesApi, operator: NetworkPeer = manifests.OPERATOR_PEER):
        self.key = key
        self.indexes = indexes
        self.api = api
        self.operator = operator  # where the operator's pods run: the NetworkPolicy lets them in
        self.applied: dict[str, str] = {}  # Kind/name -> digest of what was last applied
        self.deployed: dict[str, Any] | None = None  # the Deployment as last applied (or read once): its /dev/shm size is kept
        self.known_keys: dict[manifests.KeySecret, str] = {}  # each key, as read from its Secret (or written to it)
        self.key_checked = False  # the Secrets were read since the last resync
        self.policy_removed = False  # a NetworkPolicy the spec turned off was deleted since the last resync
        # Kind/name -> the object of the last pass and its digest: a model's config ConfigMap is the same
        # object while its rendering is kept, and is not digested again
        self.digested: dict[str, tuple[dict[str, Any], str]] = {}
        self.schema_checked: dict[str, str] = {}  # Kind/name -> the digest of its content the schema last took

    @property
    def label(self) -> str:
        return f"{self.key[0]}/{self.key[1]}"

    async def keys(self, rendered: RenderedServer, read_again: bool) -> dict[manifests.KeySecret, str]:
        """The keys the pods get, from their Secrets: read once, then again after each resync and when
        asked (after a pass in which a pod refused the control key)."""
        if len(self.known_keys) < len(manifests.KEY_SECRETS) or not self.key_checked or read_again:
            self.known_keys = {which: await self._key_from_secret(rendered, which) for which in manifests.KEY_SECRETS}
            self.key_checked = True
        return self.known_keys

    async def _key_from_secret(self, rendered: RenderedServer, which: manifests.KeySecret) -> str:
        """The Secret's key. A Secret someone deleted is made again with the key the operator holds;
        holding none (it restarted meanwhile), with a new key. The key is never replaced silently under
        running pods: its digest is in the pod template, so a key other than theirs rolls them."""
        name = which.secret_name(rendered.server)
        secret = await self.api.get("Secret", self.key[0], name)
        if secret is None:
            secret = await self._create_secret(rendered, which, self.known_keys.get(which) or secrets.token_urlsafe(32))
        key = base64.b64decode(secret["data"][which.data_key]).decode()
        deployed = await self._deployment()
        template = ((deployed or {}).get("spec") or {}).get("template") or {}
        started_with = ((template.get("metadata") or {}).get("annotations") or {}).get(which.digest_annotation)
        if started_with not in (None, manifests.key_digest(key)):
            why = "it was changed, or made anew while the operator did not hold the key"
            self._tell("Warning", "ControlKeyRotated", f"the pods run with another key than Secret {name} holds ({why}): they roll to it")
        return key

    async def _create_secret(self, rendered: RenderedServer, which: manifests.KeySecret, key: str) -> dict[str, Any]:
        try:
            created = await self.api.create(manifests.key_secret(rendered.server, which, key))
        except ApiError as error:
            if error.status != 409:
                raise
            made = await self.api.get("Secret", self.key[0], which.secret_name(rendered.server))  # made meanwhile: use that key
            assert made is not None
            return made
        if key == self.known_keys.get(which):
            self._tell("Normal", "ControlKeyRecreated", f"Secret {created['metadata']['name']} was deleted; made again with the key the pods run with")
        return created

    def _tell(self, kind: str, reason: str, message: str) -> None:
        """Log it, and post it as an Event on the TritonServer (an inline one may not exist yet)."""
        logger.warning("TritonServer %s: %s", self.label, message)
        server = self.indexes.server(self.key)
        if server is not None:
            kopf.event(server, type=kind, reason=reason, message=message)

    async def _deployment(self) -> dict[str, Any] | None:
        """The Deployment as last applied, or as read once since the last resync."""
        if self.deployed is None:
            self.deployed = await self.api.get("Deployment", *self.key)
        return self.deployed

    async def changed(self, rendered: RenderedServer, keys: Mapping[manifests.KeySecret, str]) -> tuple[list[Write], list[Finding]]:
        """The children that changed since last written (the Secrets are the keys', never applied
        over), and the findings of those the Kubernetes schema refuses."""
        namespace, _ = self.key
        deployed = await self._deployment()
        digests = {which: manifests.key_digest(key) for which, key in keys.items()}
        objects = [
            *(obj for obj in server_objects(rendered, None, deployed, digests, self.operator) if obj["kind"] != "Secret"),
            *model_config_maps(rendered.models),  # made once per rendering: not to be changed here
        ]
        writes, findings = [], []
        digested: dict[str, tuple[dict[str, Any], str]] = {}
        for obj in objects:
            if obj["metadata"].get("namespace") != namespace:
                obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
            where = _where(obj)
            last = self.digested.get(where)
            fingerprint = last[1] if last is not None and last[0] is obj else digest(obj)
            digested[where] = (obj, fingerprint)
            if self.applied.get(where) == fingerprint:
                continue
            problems = [] if self.schema_checked.get(where) == fingerprint else check_manifests([obj])
            if problems:
                findings += problems
                continue
            self.schema_checked[where] = fingerprint
            if obj["kind"] == "ConfigMap" and self._config_map_current(obj):
                self.applied[where] = fingerprint
            else:
                writes.append((obj, fingerprint))
        self.digested = digested
        self.schema_checked = {where: fingerprint for where, fingerprint in self.schema_checked.items() if where in digested}
        return writes, findings

    async def apply(self, writes: list[Write]) -> bool:
        """Write each object; one the API server refuses or does not answer is logged and written again
        next pass (False), and never stops the others or the pods' sync."""
        written = True
        for obj, fingerprint in writes:
            try:
                await self.api.apply(obj)
            except API_FAILURES as error:
                logger.warning("writing %s of TritonServer %s failed: %s", _where(obj), self.label, failure(error))
                written = False
                continue
            self.applied[_where(obj)] = fingerprint
            if obj["kind"] == "Deployment":
                self.deployed = obj
        return written

    async def remove_unwanted_policy(self, rendered: RenderedServer) -> bool:
        """Delete the server's NetworkPolicy once its spec turns it off (again after each resync, as a
        deleted Secret is made again): left behind, it would go on deciding who reaches the pods. False
        when the API server did not take the delete (tried again next pass)."""
        name = rendered.server.name
        if rendered.server.spec.network_policy.enabled:
            self.policy_removed = False
            return True
        if self.policy_removed:
            return True
        try:
            await self.api.delete("NetworkPolicy", self.key[0], name)
        except API_FAILURES as error:
            logger.warning("deleting NetworkPolicy %s of TritonServer %s, which its spec turned off, failed: %s", name, self.label, failure(error))
            return False
        self.policy_removed = True
        self.forget_applied("NetworkPolicy", name)
        return True

    def forget(self) -> None:
        """Before a resync: the Secrets are read again (a deleted one is made again with the key held);
        the Deployment, Service and child TritonServer are read and applied again (server-side apply
        of an unchanged object changes nothing); a config ConfigMap is remembered only while it
        still exists."""
        namespace, _ = self.key
        self.key_checked = False
        self.policy_removed = False
        self.deployed = None
        self.applied = {
            where: fingerprint
            for where, fingerprint in self.applied.items()
            if where.startswith("ConfigMap/") and self.indexes.config_map(namespace, where.split("/", 1)[1]) is not None
        }

    def forget_applied(self, kind: str, name: str) -> None:
        """An object deleted by the worker: written again as soon as the spec asks for it again."""
        self.applied.pop(f"{kind}/{name}", None)

    def _config_map_current(self, obj: Mapping[str, Any]) -> bool:
        existing = self.indexes.config_map(self.key[0], obj["metadata"]["name"])
        return existing is not None and existing.get("digest") == config_map_digest(obj)


def _where(obj: Mapping[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"
