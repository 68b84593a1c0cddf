"""A small Kubernetes API client for the objects the operator writes, on kopf's credentials.

kopf authenticates through a login handler; the same `kopf.ConnectionInfo` opens this client's
session, so there is one source of credentials. Writes are JSON merge patches (what kopf sends
too; a status is replaced whole, its dropped keys set to null), server-side apply for the objects
the operator owns whole (after a create, a JSON patch of managedFields makes the create's fields the
apply's), and a strategic-merge patch for pod conditions (it merges conditions by type, so the
kubelet's own conditions stay). The one delete is of an autoscaler the spec no longer
asks for (autoscaler.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import kopf

logger = logging.getLogger(__name__)

FIELD_MANAGER = "triton-operator"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # JSON is YAML
JSON_PATCH = "application/json-patch+json"

# The kinds the operator reads or writes: kind -> (API path prefix, plural).
KINDS: dict[str, tuple[str, str]] = {
    "TritonServer": ("/apis/triton-operator.io/v1alpha1", "tritonservers"),
    "TritonModel": ("/apis/triton-operator.io/v1alpha1", "tritonmodels"),
    "Deployment": ("/apis/apps/v1", "deployments"),
    "Service": ("/api/v1", "services"),
    "Secret": ("/api/v1", "secrets"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "Pod": ("/api/v1", "pods"),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases"),  # leader election (lease.py)
    "HorizontalPodAutoscaler": ("/apis/autoscaling/v2", "horizontalpodautoscalers"),  # autoscaler.py
    "ScaledObject": ("/apis/keda.sh/v1alpha1", "scaledobjects"),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies"),  # children.py
}

Login = Callable[[], Awaitable[kopf.ConnectionInfo]]


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


# What a request to the API server can fail with: a refusal, no connection, no answer in time. A write
# that fails so is logged and tried again on the worker's backoff.
API_FAILURES = (ApiError, aiohttp.ClientError, asyncio.TimeoutError)
CONFLICT = 409  # a write refused: the object changed since the version it names, or its name is taken
INVALID = 422  # a write refused: the object it would make breaks the API's rules
# A write the API server refuses as it stands (malformed, forbidden, invalid): said on the object it was for, as
# well as logged, since trying again changes nothing until the spec, the chart's RBAC or the object changes.
REFUSALS = frozenset({400, 403, INVALID})
OWNERSHIP_TRIES = 5  # reads and patches moving a create's fields to the apply, while others write the object


def failure(error: BaseException) -> str:
    """An API failure for a log line: a request that timed out says nothing of itself but its type."""
    return str(error) or type(error).__name__


def object_path(kind: str, namespace: str, name: str | None = None, subresource: str | None = None) -> str:
    prefix, plural = KINDS[kind]
    path = f"{prefix}/namespaces/{namespace}/{plural}"
    return "/".join(part for part in (path, name, subresource) if part)


class KubernetesApi:
    """Authenticated requests; a 401 logs in again once (tokens rotate)."""

    def __init__(self) -> None:
        self._login: Login | None = None
        self._info: kopf.ConnectionInfo | None = None
        self._session: aiohttp.ClientSession | None = None
        self._closing: set[asyncio.Task[None]] = set()

    def authenticate(self, info: kopf.ConnectionInfo, login: Login) -> None:
        """Use these credentials from now on, and `login` for new ones (called by kopf's login handler)."""
        self._login = login
        if info != self._info:
            self._info = info
            self._discard_session()

    def _discard_session(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            # Requests in flight on the old session finish on it; close it in the background.
            task = asyncio.get_running_loop().create_task(session.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            assert self._info is not None, "not logged in"
            self._session = aiohttp.ClientSession(
                base_url=self._info.server.rstrip("/") + "/",
                connector=aiohttp.TCPConnector(ssl=self._info.as_ssl_context()),
                headers={**self._info.as_http_headers(), "User-Agent": FIELD_MANAGER},
                timeout=aiohttp.ClientTimeout(total=60),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> dict[str, Any] | None:
        """The response object; None for 404. Other failures raise ApiError with the server's message."""
        assert self._login is not None, "kopf's login handler has not run"
        for attempt in (1, 2):
            session = self._open()
            data = None if body is None else json.dumps(body)
            async with session.request(
                method, path.lstrip("/"), data=data, headers={"Content-Type": content_type}, params=params
            ) as response:
                if response.status == 401 and attempt == 1:
                    self.authenticate(await self._login(), self._login)
                    continue
                if response.status == 404:
                    return None
                payload = await response.json(content_type=None) if response.content_length != 0 else {}
                if response.status >= 400:
                    message = payload.get("message", "") if isinstance(payload, dict) else str(payload)
                    raise ApiError(response.status, message)
                return payload
        raise AssertionError("unreachable")

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.request("GET", object_path(kind, namespace, name))

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """POST `obj`; its fields are then made the operator's Apply entry's (_as_applied), for a later
        server-side apply of it to drop what it no longer holds. The object as stored after both (its
        resourceVersion is the one a conditional write of it names next)."""
        meta = obj["metadata"]
        created = await self.request("POST", object_path(obj["kind"], meta["namespace"]), obj)
        assert created is not None
        try:
            return await self._as_applied(object_path(obj["kind"], meta["namespace"], meta["name"]), created) or created
        except API_FAILURES as error:  # made all the same: its next apply moves them (apply)
            logger.info("%s %s: its fields stay its create's for now: %s", obj["kind"], meta["name"], failure(error))
            return created

    async def apply(self, obj: Mapping[str, Any]) -> None:
        """Server-side apply: one request that creates the object or sets it to `obj` (the operator owns
        these objects whole, so it takes every field from other managers). The API server authorizes
        an apply that creates as `create` as well as `patch`. An object an older operator created holds
        the fields of its create under an Update entry, which an apply never drops: those are moved to
        the Apply entry first where the apply is refused as invalid (a memory limit no longer rendered
        under a larger request, say), else after it, and applied again."""
        meta = obj["metadata"]
        path = object_path(obj["kind"], meta["namespace"], meta["name"])
        try:
            applied = await self._apply_once(path, obj)
        except ApiError as error:
            if error.status != INVALID or not await self._as_applied(path, await self.request("GET", path)):
                raise
            applied = await self._apply_once(path, obj)
        if await self._as_applied(path, applied):
            await self._apply_once(path, obj)

    async def _apply_once(self, path: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        params = {"fieldManager": FIELD_MANAGER, "force": "true"}
        applied = await self.request("PATCH", path, obj, APPLY_PATCH, params)
        if applied is None:
            # An apply creates what is missing: a 404 means the kind is not served (a CRD not installed, e.g.
            # KEDA's) or the namespace is gone.
            raise ApiError(
                404,
                f"{obj['apiVersion']} {obj['kind']} is not served (is its CRD "
                f"installed?) or namespace {obj['metadata']['namespace']} is gone",
            )
        return applied

    async def _as_applied(self, path: str, obj: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """Move the fields the operator owns by an Update (its create: a POST is an Update to the API
        server) into its Apply entry (applied_ownership_patch): the object as patched, None where it
        held none so. The patch names the version it was made from; where another writer came between
        (the Deployment controller writes a new Deployment at once), it is made again from a fresh read."""
        for _ in range(OWNERSHIP_TRIES):
            if obj is None or (upgrade := applied_ownership_patch(obj)) is None:
                return None
            try:
                return await self.request("PATCH", path, upgrade, JSON_PATCH)
            except ApiError as error:
                if error.status not in (CONFLICT, INVALID):  # a failed `test` of the version is a 422
                    raise
            obj = await self.request("GET", path)
        raise ApiError(CONFLICT, f"{path}: its fields could not be made the operator's apply's: written meanwhile")

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        """Delete the object; one that is already gone (or a kind that is not served) is no error."""
        await self.request("DELETE", object_path(kind, namespace, name))

    async def set_finalizers(self, kind: str, metadata: Mapping[str, Any], finalizers: list[str]) -> bool:
        """Set an object's finalizers by a merge patch at the resourceVersion they were read at: a list
        replaced at another version could drop another controller's finalizer, so the API server refuses
        it (409) and the object's next event, which a change always brings, makes the write again. False
        when it was not written (a refusal other than that one is logged)."""
        namespace, name = metadata.get("namespace", ""), metadata["name"]
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": metadata.get("resourceVersion")}}
        try:
            await self.patch(kind, namespace, name, patch)
        except API_FAILURES as error:
            if not (isinstance(error, ApiError) and error.status == CONFLICT):
                logger.warning("setting the finalizers of %s %s/%s failed: %s", kind, namespace, name, failure(error))
            return False
        return True

    async def patch(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any] | None:
        """A JSON merge patch; None if the object is gone. A patch holding `metadata.resourceVersion` is a
        conditional write: the API server refuses it with 409 if the object changed since that version."""
        return await self.request("PATCH", object_path(kind, namespace, name), patch, MERGE_PATCH)

    async def patch_status(
        self, kind: str, namespace: str, name: str, status: Mapping[str, Any], replacing: Mapping[str, Any]
    ) -> None:
        """Set the whole status. `replacing` is the status as last seen or written: what it holds and
        `status` does not is removed (a merge patch alone keeps it, beside what replaced it)."""
        body = {"status": merge_patch_between(replacing, status)}
        await self.request("PATCH", object_path(kind, namespace, name, "status"), body, MERGE_PATCH)

    async def set_pod_condition(self, namespace: str, name: str, condition: Mapping[str, Any]) -> None:
        body = {"status": {"conditions": [condition]}}
        await self.request("PATCH", object_path("Pod", namespace, name, "status"), body, STRATEGIC_MERGE_PATCH)


def merge_patch_between(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns `old` into `new`: keys `new` lacks are set to null, in
    nested objects too, and keys it holds unchanged are left out, so a write never puts back a field
    another writer changed meanwhile (a model's placement, beside the status its worker writes)."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        previous = old.get(key)
        if key in old and previous == value:
            continue
        patch[key] = (
            merge_patch_between(previous, value)
            if isinstance(previous, Mapping) and isinstance(value, Mapping)
            else value
        )
    return patch


def _ours_by_update(entry: Mapping[str, Any]) -> bool:
    return entry.get("manager") == FIELD_MANAGER and entry.get("operation") == "Update" and not entry.get("subresource")


def _union(fields: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """Two managedFields field sets (FieldsV1: nested objects, a key per field) as one."""
    return {key: _union(fields.get(key) or {}, more.get(key) or {}) for key in fields.keys() | more.keys()}


def applied_ownership_patch(obj: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """A JSON patch moving the fields the operator owns by an Update (its create: a POST is an Update to
    the API server) into its Apply entry, as kubectl's upgrade from client-side apply does; None where it
    holds none so. Conditional on the object's resourceVersion: a refused patch is tried at the next apply."""
    entries = list((obj.get("metadata") or {}).get("managedFields") or [])
    updates = [entry for entry in entries if _ours_by_update(entry)]
    if not updates:
        return None
    kept = [entry for entry in entries if not _ours_by_update(entry)]
    applied = next((e for e in kept if e.get("manager") == FIELD_MANAGER and e.get("operation") == "Apply"), None)
    fields = (applied.get("fieldsV1") or {}) if applied else {}
    for update in updates:
        fields = _union(fields, update.get("fieldsV1") or {})
    entry = {**(applied or updates[0]), "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": fields}
    managed = [entry if e is applied else e for e in kept] if applied else [*kept, entry]
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": obj["metadata"]["resourceVersion"]},
        {"op": "replace", "path": "/metadata/managedFields", "value": managed},
    ]
