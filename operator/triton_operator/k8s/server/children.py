"""A server's children, written by its worker: the child TritonServer of an inline server, the
Deployment, the Service, the NetworkPolicy, the autoscaler and the models' config ConfigMaps; the key
Secrets are key_secrets.py's, which hand the keys (their digests go into the pod template).

Only objects the operator controls are written (ownership.py): a child whose name another object holds
is left alone and reported (condition reason NameTaken), while the server's other children go on. A
key that is not known (its Secret's name taken, or a Secret without a usable key while the operator
holds none) also holds back the Deployment, whose pods would read their key from it, and the pods'
sync; any other taken name holds back only itself.

Objects are written only when what was rendered changed since it was last written (the operator's
Expectations), so a quiet pass makes no API calls; a resync forgets what was written, so a deleted child
comes back. Deciding what to write (changed) and writing it (apply, called by the pass's execute) are apart.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ...api.findings import Finding
from ...api.traffic import NetworkPeer
from ...decide.seen import ServerKey
from ...render import manifests
from ...render.fleet import RenderedServer, model_config_maps, server_objects
from ...render.schema import check_manifests
from ..actions import Delete, Write
from ..api import API_FAILURES, CONFLICT, REFUSALS, ApiError, KubernetesApi, failure
from ..events import Event
from ..expectations import Expectations, Written
from ..watch.indexes import Indexes, config_map_digest, digest
from . import ownership
from .key_secrets import KeySecrets

logger = logging.getLogger(__name__)


class Children:
    """Writes a server's children and remembers what it wrote."""

    def __init__(
        self,
        key: ServerKey,
        indexes: Indexes,
        api: KubernetesApi,
        operator: NetworkPeer = manifests.OPERATOR_PEER,
        key_max_age_seconds: float = 0,
        expectations: Expectations | None = None,
    ):
        self.key = key
        self.expectations = expectations or Expectations()
        self.indexes = indexes
        self.api = api
        self.operator = operator  # where the operator's pods run: the NetworkPolicy lets them in
        self.secrets = KeySecrets(key, indexes, api, self.deployment, self._tell, key_max_age_seconds)
        self.taken: dict[
            str, str
        ] = {}  # Kind/name -> why the operator does not write it (another object holds the name)
        self.refused: dict[str, str] = {}  # Kind/name -> the API server's refusal of its last write
        self.told: list[Event] = []  # what the key Secrets had to say since the last pass took it
        self.deployed: dict[str, Any] | None = (
            None  # the Deployment as last applied (or read once): its /dev/shm size is kept
        )
        # Kind/name -> the object of the last pass and its digest: a model's config ConfigMap is the same
        # object while its rendering is kept, and is not digested again
        self.digested: dict[str, tuple[dict[str, Any], str]] = {}
        self.schema_checked: dict[str, str] = {}  # Kind/name -> the digest of its content the schema last took

    @property
    def label(self) -> str:
        return f"{self.key[0]}/{self.key[1]}"

    def _tell(self, kind: str, reason: str, message: str) -> None:
        """Log it, and keep it for the pass's Events on the TritonServer (an inline one may not exist yet)."""
        logger.warning("TritonServer %s: %s", self.label, message)
        server = self.indexes.server(self.key)
        if server is not None:
            self.told.append(Event(server, kind, reason, message))

    def written(self, where: str) -> Written:
        kind, name = where.split("/", 1)
        return Written(kind, self.key[0], name)

    async def deployment(self) -> dict[str, Any] | None:
        """The Deployment as last applied, or as read once since the last resync."""
        if self.deployed is None:
            self.deployed = await self.api.get("Deployment", *self.key)
        return self.deployed

    def changed(
        self,
        rendered: RenderedServer,
        keys: Mapping[manifests.KeySecret, str] | None,
        deployed: Mapping[str, Any] | None,
    ) -> tuple[list[Write], list[Finding]]:
        """The children that changed since last written (the Secrets are the keys', never applied over;
        without keys, a key Secret's name taken, the Deployment waits too), and the findings of those
        the Kubernetes schema refuses. `deployed`: the Deployment as last applied or read (its /dev/shm
        size is kept)."""
        namespace, _ = self.key
        digests = {which: manifests.key_digest(key) for which, key in keys.items()} if keys is not None else None
        objects = [
            *(
                obj
                for obj in server_objects(rendered, None, deployed, digests, self.operator)
                if obj["kind"] != "Secret" and (keys is not None or obj["kind"] != "Deployment")
            ),
            *model_config_maps(rendered.models),  # made once per rendering: not to be changed here
        ]
        writes, findings = [], []
        digested: dict[str, tuple[dict[str, Any], str]] = {}
        applied = self.expectations.part("object")
        for obj in objects:
            if obj["metadata"].get("namespace") != namespace:
                obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
            where = _where(obj)
            last = self.digested.get(where)
            fingerprint = last[1] if last is not None and last[0] is obj else digest(obj)
            digested[where] = (obj, fingerprint)
            if applied.get((obj["kind"], namespace, obj["metadata"]["name"], "object")) == fingerprint:
                continue
            problems = [] if self.schema_checked.get(where) == fingerprint else check_manifests([obj])
            if problems:
                findings += problems
                continue
            self.schema_checked[where] = fingerprint
            if obj["kind"] == "ConfigMap" and self._config_map_current(obj):
                self.expectations.expect(self.written(where), fingerprint)
            else:
                writes.append((obj, fingerprint))
        self.digested = digested
        self.schema_checked = {
            where: fingerprint for where, fingerprint in self.schema_checked.items() if where in digested
        }
        self.taken = {where: why for where, why in self.taken.items() if where in digested}
        self.refused = {where: why for where, why in self.refused.items() if where in digested}
        return writes, findings

    async def apply(self, writes: list[Write]) -> bool:
        """Write each object whose name is free (create) or held by what the operator made for it
        (server-side apply); one another object holds is left alone and reported (self.taken). One
        the API server refuses or does not answer is logged; either is tried again next pass (False),
        and never stops the others or the pods' sync."""
        written = True
        for obj, fingerprint in writes:
            where = _where(obj)
            try:
                exists, holder = await self._holder(obj)
                # Where nothing is, a create; a name taken since the index was read is read and decided again.
                if not exists and not await self._created(obj):
                    exists, holder = await self._holder(obj, read=True)
                    if not exists:  # taken and deleted again since: the next pass creates it
                        written = False
                        continue
                if ownership.taken(obj, exists, holder):
                    self.taken[where] = ownership.taken_message(obj["kind"], obj["metadata"]["name"])
                    logger.warning("TritonServer %s: %s", self.label, self.taken[where])
                    written = False
                    continue
                self.taken.pop(where, None)
                if exists:
                    await self.api.apply(obj)
            except API_FAILURES as error:
                logger.warning("writing %s of TritonServer %s failed: %s", where, self.label, failure(error))
                if isinstance(error, ApiError) and error.status in REFUSALS:
                    self.refused[where] = f"{where}: the API server refused it: {error.message}"
                written = False
                continue
            self.refused.pop(where, None)
            self.expectations.expect(self.written(where), fingerprint)
            if obj["kind"] == "Deployment":
                self.deployed = obj
        return written

    def unwanted_policy(self, rendered: RenderedServer) -> str | None:
        """The NetworkPolicy to delete once the spec turns it off (again after each resync, as a deleted
        Secret is made again): left behind, it would go on deciding who reaches the pods."""
        name = rendered.server.name
        if rendered.server.spec.network_policy.enabled:
            self.expectations.seen(Written("NetworkPolicy", self.key[0], name, "deleted"))
            return None
        return None if self.expectations.expected(Written("NetworkPolicy", self.key[0], name, "deleted")) else name

    async def delete(self, action: Delete) -> bool:
        """Delete an object the operator made and no longer wants; False when the API server did not take it."""
        try:
            await self.api.delete(action.kind, action.namespace, action.name)
        except API_FAILURES as error:
            logger.warning("%s of TritonServer %s (%s) failed: %s", action, self.label, action.why, failure(error))
            return False
        logger.info("TritonServer %s: %s (%s)", self.label, action, action.why)
        self.expectations.seen(Written(action.kind, action.namespace, action.name))
        if action.kind == "NetworkPolicy":
            self.expectations.expect(Written(action.kind, action.namespace, action.name, "deleted"), True)
        return True

    async def _created(self, obj: Mapping[str, Any]) -> bool:
        """Create `obj`; False when its name is taken (409). The indexes follow the API server's watch,
        which can trail this worker's own creates by seconds when thousands of objects change at once:
        a ConfigMap the worker made a pass ago may not be indexed yet."""
        try:
            await self.api.create(obj)
        except ApiError as error:
            if error.status != CONFLICT:
                raise
            return False
        return True

    async def _holder(self, obj: Mapping[str, Any], read: bool = False) -> tuple[bool, str | None]:
        """Whether an object is under `obj`'s name, and its controller's uid: from the operator's
        indexes for ConfigMaps and TritonServers, the Deployment as last read, else (or when `read`) a read."""
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind == "ConfigMap" and not read:
            view = self.indexes.config_map(self.key[0], name)
            return view is not None, (view or {}).get("controller")
        if kind == "TritonServer" and not read:
            existing = self.indexes.server((self.key[0], name))
        elif kind == "Deployment" and not read:
            existing = await self.deployment()
        else:
            existing = await self.api.get(kind, self.key[0], name)
        return existing is not None, ownership.controller_uid(existing)

    @property
    def names_taken(self) -> list[str]:
        """Why each child another object's name holds, the key Secrets' too, is not written."""
        return [*self.secrets.taken.values(), *self.taken.values()]

    def forget(self) -> None:
        """Before a resync: the Secrets are read again (a deleted one is made again with the key held);
        the Deployment, Service and child TritonServer are read and applied again (server-side apply
        of an unchanged object changes nothing); a config ConfigMap is remembered only while it
        still exists."""
        namespace, server = self.key
        self.secrets.forget()
        self.deployed = None
        self.expectations.seen(Written("NetworkPolicy", namespace, server, "deleted"))
        for where in self.digested:
            kind, name = where.split("/", 1)
            if kind != "ConfigMap" or self.indexes.config_map(namespace, name) is None:
                self.expectations.seen(self.written(where))

    def _config_map_current(self, obj: Mapping[str, Any]) -> bool:
        existing = self.indexes.config_map(self.key[0], obj["metadata"]["name"])
        return existing is not None and existing.get("digest") == config_map_digest(obj)


def _where(obj: Mapping[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"
