"""kmock's KubernetesEmulator, with the few API-server behaviours the operator relies on.

kmock stores objects and streams watch events, but it assigns no uid, resourceVersion or
generation, names nothing from generateName, merges every patch as plain JSON, lets `/status`
change spec (and the main endpoint change status), filters nothing by label, stores created
objects without the namespace of their URL, fails on the path that lists Namespaces, answers a
server-side apply of a missing object with 404 where a real API server creates it, serves no
scale subresource (it hands out the object itself, and merges a Scale into it), deletes a Pod
at once where a real API server lets its kubelet stop it first, marks an object its finalizers
hold for deletion under the resourceVersion it had, where that is a write like any other, and
answers every watch with every object it holds, where a real API server sends a watch resumed
from a resourceVersion only what changed after it (kopf resumes from the last version it saw each
time a watch ends: replaying 10,000 objects each time is work a cluster never gives it). Each
override below stands for one rule a real API server keeps; nothing else is added, besides reading
back kmock's record of every request as RBAC sees it (`calls`, and `tally` when only the latest are
kept) and the faults tests inject on purpose (tests/support/faults.py: failed or held requests, stalled,
dropped or ended watch streams).

kmock's public names (`kmock.Request`, `kmock.action`, `kmock.Payload`, the emulator's `_handle` and
`_serve_*` hooks) carry all of it but three things: kmock parses request paths in a module-level
function no public name reaches, so the Namespaces path is mended there (`_parse_path`); a
recorded request's action cannot be changed through them (`_handle`, for an apply that creates and
for a Pod's graceful deletion, which is a write until its kubelet is done); and kmock finds the one
object a request names by checking every object it holds, which with ten thousand objects costs more
than the rest of a request, so that lookup is by the object's key (`_KubernetesEmulator__get_objs`,
the name its private method has in subclasses).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import itertools
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import parsing  # no public name reaches kmock's path parser (see the module docstring)

from tests.support.faults import ApiFault, Hold, WatchStream
from triton_operator.api.server import TritonServerSpec

# Kinds served with a status subresource (the CRDs declare it; pods, deployments, replicasets and HPAs have it).
STATUS_SUBRESOURCE = {"tritonservers", "tritonmodels", "pods", "deployments", "replicasets", "horizontalpodautoscalers"}
# Kinds served with a scale subresource, by where their Scale's fields are (the TritonServer CRD declares it).
SCALE_SUBRESOURCE = {
    "tritonservers": {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
}
# The CRD's default for spec.replicas, which a real API server stores; the emulator does not default, so a
# Scale read of a TritonServer created without replicas reports it.
DEFAULT_REPLICAS = TritonServerSpec.model_fields["replicas"].default
NOT_SPEC = {"metadata", "status", "apiVersion", "kind"}
APPLY_PATCH = "application/apply-patch+yaml"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
# Holds a Pod in kmock's store while its kubelet stops it (see ApiServer._graceful_deletion).
GRACEFUL_DELETION = "emulator.kmock/graceful-deletion"

RESOURCES: dict[str, kmock.ResourceInfo] = {
    "apiextensions.k8s.io/v1/customresourcedefinitions": kmock.ResourceInfo(
        kind="CustomResourceDefinition", namespaced=False, verbs={"list", "watch", "get"}
    ),
    "triton-operator.io/v1alpha1/tritonservers": kmock.ResourceInfo(
        kind="TritonServer",
        namespaced=True,
        subresources={"status", "scale"},
        verbs={"list", "watch", "get", "patch", "create", "delete"},
    ),
    "triton-operator.io/v1alpha1/tritonmodels": kmock.ResourceInfo(
        kind="TritonModel",
        namespaced=True,
        subresources={"status"},
        verbs={"list", "watch", "get", "patch", "create", "delete"},
    ),
    "v1/pods": kmock.ResourceInfo(
        kind="Pod",
        namespaced=True,
        subresources={"status"},
        verbs={"list", "watch", "get", "patch", "create", "delete"},
    ),
    "v1/configmaps": kmock.ResourceInfo(
        kind="ConfigMap", namespaced=True, verbs={"list", "watch", "get", "patch", "create", "delete"}
    ),
    "v1/secrets": kmock.ResourceInfo(kind="Secret", namespaced=True, verbs={"get", "patch", "create"}),
    "v1/services": kmock.ResourceInfo(kind="Service", namespaced=True, verbs={"get", "patch", "create"}),
    # kopf waits to see namespaces in discovery even cluster-wide (where it never lists them).
    "v1/namespaces": kmock.ResourceInfo(kind="Namespace", namespaced=False, verbs={"list", "watch"}),
    "v1/events": kmock.ResourceInfo(kind="Event", namespaced=True, verbs={"create"}),
    "apps/v1/deployments": kmock.ResourceInfo(
        kind="Deployment",
        namespaced=True,
        subresources={"status"},
        verbs={"list", "watch", "get", "patch", "create", "delete"},
    ),
    # The mini cluster's Deployment controller (tests/support/minicluster) keeps a ReplicaSet per pod template.
    "apps/v1/replicasets": kmock.ResourceInfo(
        kind="ReplicaSet",
        namespaced=True,
        subresources={"status"},
        verbs={"list", "watch", "get", "patch", "create", "delete"},
    ),
    # Leader election (triton_operator/k8s/election/lease.py): conditional merge patches, refused with 409 on a stale
    # resourceVersion.
    "coordination.k8s.io/v1/leases": kmock.ResourceInfo(
        kind="Lease", namespaced=True, verbs={"get", "patch", "create"}
    ),
    # Autoscalers (triton_operator/k8s/server/autoscaler_upkeep.py); KEDA's ScaledObject as if its CRD were installed.
    "autoscaling/v2/horizontalpodautoscalers": kmock.ResourceInfo(
        kind="HorizontalPodAutoscaler",
        namespaced=True,
        subresources={"status"},
        verbs={"get", "patch", "create", "delete"},
    ),
    "keda.sh/v1alpha1/scaledobjects": kmock.ResourceInfo(
        kind="ScaledObject", namespaced=True, subresources={"status"}, verbs={"get", "patch", "create", "delete"}
    ),
    # Each server's NetworkPolicy (triton_operator/k8s/server/children.py).
    "networking.k8s.io/v1/networkpolicies": kmock.ResourceInfo(
        kind="NetworkPolicy", namespaced=True, verbs={"get", "patch", "create", "delete"}
    ),
}


@dataclass(frozen=True)
class ApiCall:
    """One request as RBAC reads it: a verb on a resource, in a namespace or cluster-wide (None)."""

    verb: str
    group: str
    resource: str  # the plural, with "/subresource" when there is one, as RBAC rules name it
    namespace: str | None


WRITE_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def api_call(method: str, path: str, params: Mapping[str, str]) -> ApiCall | None:
    """The RBAC verb and resource of a request; None for discovery (/api, /apis/GROUP/VERSION), which
    every authenticated user may read (the system:discovery ClusterRole), so no rule of ours covers it."""
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) > 2:
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) > 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = None
    # /namespaces/NS/PLURAL... is inside a namespace; /namespaces, /namespaces/NS and /namespaces/NS/status are
    # Namespaces.
    if rest[0] == "namespaces" and len(rest) > 2 and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    plural, named, subresource = rest[0], len(rest) > 1, "/".join(rest[2:])
    if method == "GET":
        verb = "watch" if params.get("watch") in ("true", "1") else "get" if named else "list"
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = WRITE_VERBS[method]
    return ApiCall(verb, group, f"{plural}/{subresource}" if subresource else plural, namespace)


_kmock_parse_path = parsing.parse_path


def _parse_path(path: str) -> parsing.ParsedPath:
    """The collection of Namespaces, /api/v1/namespaces, which kmock 0.8 takes for a namespace
    without a name and fails on (kopf lists and watches it when it serves given namespaces)."""
    if path.rstrip("/") == "/api/v1/namespaces":
        return parsing.ParsedPath(group="", version="v1", plural="namespaces")
    return _kmock_parse_path(path)


parsing.parse_path = _parse_path


def _now(after_seconds: float = 0) -> str:
    moment = datetime.datetime.now(tz=datetime.UTC) + datetime.timedelta(seconds=after_seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _merge_conditions(current: list[dict[str, Any]], patch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A strategic-merge patch merges pod conditions by `type` (the list's patch merge key)."""
    merged = {condition["type"]: condition for condition in current}
    for condition in patch:
        merged[condition["type"]] = {**merged.get(condition["type"], {}), **condition}
    return list(merged.values())


def _removals(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch that also deletes the keys `desired` no longer has (server-side apply replaces)."""
    patch: dict[str, Any] = {key: None for key in current if key not in desired}
    for key, value in desired.items():
        old = current.get(key)
        patch[key] = _removals(old, value) if isinstance(old, Mapping) and isinstance(value, Mapping) else value
    return patch


@attrs.define(kw_only=True)
class ApiServer(kmock.KubernetesEmulator):
    """The emulator plus uid, resourceVersion, generation, /status rules, patch types and labelSelector."""

    _versions: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1), init=False)
    latest_version: int = attrs.field(default=0, init=False)  # the latest resourceVersion given
    faults: list[ApiFault] = attrs.field(
        factory=list, init=False
    )  # requests to fail on purpose (tests/support/faults.py)
    holds: list[Hold] = attrs.field(factory=list, init=False)  # requests left unanswered on purpose, until released
    watches: list[WatchStream] = attrs.field(
        factory=list, init=False
    )  # the open watch streams, to stall or drop on purpose
    _updating: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)
    # kmock keeps every request and matches each new one by scanning them all (quadratic): a
    # benchmark with thousands of objects keeps only the latest, enough for those in flight.
    request_history: int | None = None
    # Every resource request received, counted by its Authorization header and call: kept whole where
    # `request_history` keeps only the latest requests.
    tally: Counter[tuple[str | None, ApiCall]] = attrs.field(factory=Counter, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for resource, info in RESOURCES.items():
            self.resources[resource] = info

    def calls(self, authorization: str) -> list[ApiCall]:
        """Every resource request received so far with this Authorization header (one identity's calls).
        A server-side apply that created its object is authorized as a create too, as the API server does."""
        calls = []
        for request in self:
            if request.headers.get("Authorization") != authorization:
                continue
            call = api_call(request.method.value, request.url.path, request.params)
            if call is not None:
                calls.append(call)
            if call is not None and request.method.value == "PATCH" and request.action == kmock.action.CREATE:
                calls.append(dataclasses.replace(call, verb="create"))
        return calls

    def _KubernetesEmulator__get_objs(self, request: kmock.Request, strict: bool) -> list[Any]:
        """The objects a request names: the one under its key when it names one in a namespace (or a
        cluster-wide one, strictly), as kmock's check of every object would find it; else that check."""
        if request.name is not None and (strict or request.namespace is not None):
            key = (request.resource, request.namespace, request.name)
            return [self.objects[key]] if key in self.objects else []
        return super()._KubernetesEmulator__get_objs(request, strict)  # type: ignore[misc]

    def current(self, request: kmock.Request) -> dict[str, Any] | None:
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        return dict(self.objects[key].raw)

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        call = api_call(request.method.value, request.url.path, request.params)
        if call is not None:
            self.tally[(request.headers.get("Authorization"), call)] += 1
        if self.request_history is not None:
            for requests in (self._requests, *(payload._requests for payload in self._payloads)):
                del requests[: -self.request_history]
        hold = next((h for h in self.holds if h.matches(request.method.value, request.url.path, request.data)), None)
        if hold is not None:
            await hold.wait()
        fault = next((f for f in self.faults if f.take(request.method.value, request.url.path, request.headers)), None)
        if fault is not None:
            return await self._render_error(
                kmock.KubernetesError(
                    status=fault.status, reason="InjectedFault", message=f"injected fault: {fault.status}"
                )
            )
        plural = request.resource.plural if request.resource is not None else None
        if plural in SCALE_SUBRESOURCE and request.subresource == "scale":
            return await self._serve_scale(request, plural)
        if self._applies_to_nothing(request):
            # Server-side apply creates what is missing. kmock records a request before this hook and
            # routes it by its action, so the request itself becomes the create it is (kmock.Request
            # is frozen, and no public call changes a recorded request's action).
            object.__setattr__(request, "action", kmock.action.CREATE)
        if request.action == kmock.action.CREATE and isinstance(request.data, dict):
            metadata = request.data.setdefault("metadata", {})
            if request.namespace:
                metadata["namespace"] = request.namespace  # stored under the URL's namespace
            if not metadata.get("name") and metadata.get("generateName"):
                metadata["name"] = metadata["generateName"] + uuid.uuid4().hex[:5]  # kopf's Events are named so
            metadata.update(uid=str(uuid.uuid4()), resourceVersion=self._next_version(), creationTimestamp=_now())
            metadata["generation"] = 1
            if plural in STATUS_SUBRESOURCE:
                request.data.pop("status", None)  # status is written through /status only
        elif (request.action == kmock.action.UPDATE and isinstance(request.data, dict)) or (
            request.action == kmock.action.DELETE and request.name is not None
        ):
            return await self._update(request, plural)
        return await super()._handle(request)

    async def _update(self, request: kmock.Request, plural: str | None) -> aiohttp.web.StreamResponse:
        """A write, or a DELETE that is one: a Pod's until its kubelet is done, any object's its finalizers hold."""
        # The resourceVersion check and the write are one step, as in etcd: two patches of one
        # version (two candidates for a Lease) cannot both pass the check before either lands.
        async with self._updating:
            current = self.current(request)
            if request.action == kmock.action.DELETE:
                deletion = (
                    self._graceful_deletion(request, current) if plural == "pods" else self._held_deletion(current)
                )
                if deletion is None:
                    return await super()._handle(request)
                # A write until the kubelet or the finalizers are done; the request becomes it, as an apply that
                # creates does above.
                object.__setattr__(request, "action", kmock.action.UPDATE)
                object.__setattr__(request, "data", deletion)
            if current is not None:
                error = self._rewrite_patch(request, plural, current)
                if error is not None:
                    return await self._render_error(error)
            return await super()._handle(request)

    async def _serve_scale(self, request: kmock.Request, plural: str) -> aiohttp.web.StreamResponse:
        """The scale subresource: an autoscaling/v1 Scale read from the paths the CRD declares; a write
        (`kubectl scale` patches it, an HPA or KEDA puts it) sets spec.replicas alone, a spec change that
        bumps the generation like any other."""
        if request.method.value in ("PATCH", "PUT"):
            replicas = (
                ((request.data or {}).get("spec") or {}).get("replicas") if isinstance(request.data, dict) else None
            )
            if not isinstance(replicas, int) or replicas < 0:
                return await self._render_error(
                    kmock.KubernetesError(
                        status=422, reason="Invalid", message="spec.replicas: a whole number, at least 0"
                    )
                )
            request.data.clear()
            request.data["spec"] = {"replicas": replicas}
            object.__setattr__(
                request, "action", kmock.action.UPDATE
            )  # a write of the object itself (see the module docstring)
            await self._update(request, plural)
        current = self.current(request)
        if current is None:
            return await self._render_error(kmock.KubernetesObjectNotFoundError())
        return aiohttp.web.json_response(scale_of(current, SCALE_SUBRESOURCE[plural]))

    def _held_deletion(self, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        """The write a DELETE of an object its finalizers hold is: its deletionTimestamp, at a new
        resourceVersion; None where kmock's own handling is right (nothing holds it, or it is marked already)."""
        meta = (obj or {}).get("metadata") or {}
        if obj is None or meta.get("deletionTimestamp") or not meta.get("finalizers"):
            return None
        return {"metadata": {"deletionTimestamp": _now()}}

    def _graceful_deletion(self, request: kmock.Request, pod: dict[str, Any] | None) -> dict[str, Any] | None:
        """The write a DELETE of a Pod bound to a node is; None where the Pod goes at once.

        A bound Pod is deleted gracefully: the DELETE sets deletionTimestamp (now plus the grace period:
        the DeleteOptions' gracePeriodSeconds, else the Pod's terminationGracePeriodSeconds, else 30)
        and deletionGracePeriodSeconds, and the Pod stays while its kubelet stops it; the kubelet's
        DELETE with gracePeriodSeconds=0 then removes it. A Pod never bound (no spec.nodeName) has no
        kubelet to wait for and goes at once, as does one deleted with gracePeriodSeconds=0. kmock
        removes an object with a deletionTimestamp at its next write unless a finalizer holds it: the
        emulator's own (GRACEFUL_DELETION) holds the Pod until that last DELETE.
        """
        if pod is None or not (pod.get("spec") or {}).get("nodeName"):
            return None
        meta = pod["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        options = request.data if isinstance(request.data, dict) else {}
        grace = int(
            request.params.get(
                "gracePeriodSeconds",
                options.get("gracePeriodSeconds", pod["spec"].get("terminationGracePeriodSeconds", 30)),
            )
        )
        if not meta.get("deletionTimestamp"):
            if grace == 0:
                return None
            return {
                "metadata": {
                    "deletionTimestamp": _now(grace),
                    "deletionGracePeriodSeconds": grace,
                    "finalizers": [*finalizers, GRACEFUL_DELETION],
                }
            }
        if grace == 0 and GRACEFUL_DELETION in finalizers:
            return {"metadata": {"finalizers": [f for f in finalizers if f != GRACEFUL_DELETION]}}
        return None

    def _applies_to_nothing(self, request: kmock.Request) -> bool:
        return (
            request.action == kmock.action.UPDATE
            and request.headers.get("Content-Type", "").startswith(APPLY_PATCH)
            and isinstance(request.data, dict)
            and self.current(request) is None
        )

    def _rewrite_patch(
        self, request: kmock.Request, plural: str | None, current: dict[str, Any]
    ) -> kmock.KubernetesError | None:
        patch: dict[str, Any] = request.data
        metadata = patch.setdefault("metadata", {}) or {}
        patch["metadata"] = metadata
        expected = metadata.get("resourceVersion")
        if expected is not None and expected != current["metadata"].get("resourceVersion"):
            return kmock.KubernetesError(
                status=409,
                reason="Conflict",
                message="the object has been modified; please apply your changes to the latest version",
            )
        content_type = request.headers.get("Content-Type", "")
        if plural in STATUS_SUBRESOURCE:
            if request.subresource == "status":
                for key in [key for key in patch if key not in ("status", "metadata")]:
                    del patch[key]
                metadata = patch["metadata"] = {}  # a status write changes nothing of metadata but its version
            else:
                patch.pop("status", None)
        if content_type.startswith(STRATEGIC_MERGE_PATCH) and isinstance(
            patch.get("status", {}).get("conditions"), list
        ):
            patch["status"]["conditions"] = _merge_conditions(
                current.get("status", {}).get("conditions", []), patch["status"]["conditions"]
            )
        if content_type.startswith(APPLY_PATCH):
            for key in [key for key in patch if key not in ("metadata", "apiVersion", "kind", "status")]:
                patch[key] = (
                    _removals(current.get(key) or {}, patch[key]) if isinstance(patch[key], Mapping) else patch[key]
                )
        metadata["resourceVersion"] = self._next_version()
        merged = merge_patch(current, patch)
        if any(merged.get(key) != current.get(key) for key in (merged.keys() | current.keys()) - NOT_SPEC):
            metadata["generation"] = current["metadata"].get("generation", 1) + 1  # only spec changes count
        return None

    def _next_version(self) -> str:
        self.latest_version = next(self._versions)
        return str(self.latest_version)

    async def _serve_list(self, request: kmock.Request) -> kmock.Payload:
        """As kmock lists, with the list's resourceVersion: the latest given, to watch from."""
        result = await super()._serve_list(request)
        result["metadata"]["resourceVersion"] = str(self.latest_version)
        selector = request.params.get("labelSelector")
        if selector:
            result["items"] = [item for item in result["items"] if matches(selector, item)]
        return result

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[kmock.Payload]:
        """kmock's stream (every object held as ADDED, then each event), of which a watch from a
        resourceVersion gets only the objects written after it."""
        selector = request.params.get("labelSelector")
        since = request.params.get("resourceVersion", "")
        since_version = int(since) if since.isdigit() else 0
        stream = WatchStream(request.url.path)
        self.watches.append(stream)
        try:
            async for event in stream.until_ended(super()._serve_watch(request)):
                if stream.dropped:
                    return
                if stream.stalled:
                    continue
                if (
                    isinstance(event, dict)
                    and event.get("type") == "ADDED"
                    and int(event["object"].get("metadata", {}).get("resourceVersion") or 0) <= since_version
                ):
                    continue  # kmock's replay of an object not written since: an object added after has a later version
                if not selector or not isinstance(event, dict) or matches(selector, event.get("object", {})):
                    yield event
        finally:
            self.watches.remove(stream)


def scale_of(obj: Mapping[str, Any], paths: Mapping[str, str]) -> dict[str, Any]:
    """The object's Scale, read from the paths of its scale subresource (here all one level deep)."""

    def read(path: str) -> Any:
        section, field = path.strip(".").split(".")
        return (obj.get(section) or {}).get(field)

    spec_replicas = read(paths["specReplicasPath"])
    metadata = {
        key: obj["metadata"][key]
        for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        if key in obj["metadata"]
    }
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": metadata,
        "spec": {"replicas": DEFAULT_REPLICAS if spec_replicas is None else spec_replicas},
        "status": {
            "replicas": read(paths["statusReplicasPath"]) or 0,
            "selector": read(paths["labelSelectorPath"]) or "",
        },
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """A JSON merge patch (RFC 7386): what kmock stores for every patch, to compare with what was there."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def matches(selector: str, obj: Mapping[str, Any]) -> bool:
    """Equality-based label selectors (`a=b`, `a!=b`, `a`, `!a`), as the API server filters lists."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (part.strip() for part in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True
