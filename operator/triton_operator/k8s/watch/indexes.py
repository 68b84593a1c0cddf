"""What the operator knows of the cluster: kopf indexes of servers, models, pods and ConfigMaps, and of
the Deployments and ReplicaSets that make a pod a server's (its owner chain).

kopf fills every index from its initial listing before any other handler runs, so a server's
worker never acts on half a picture (which would unload models that are merely not listed yet).
Index values are plain, trimmed dicts: only what reconciling needs stays in memory.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import kopf

from ...api.parse import DEFAULT_NAMESPACE
from ...api.security import TRITON_CONTAINER
from ...api.status_fields import written_placement
from ...decide.crashes import termination
from ...decide.seen import Pod, ServerKey
from ...protocol.names import REVISION_PARAMETER
from ...render.deployment import MODELS_READY_CONDITION
from ...render.moves import placement_servers
from ..server.ownership import controller_uid

INSTANCE_LABEL = "app.kubernetes.io/instance"
MANAGED_BY = {"app.kubernetes.io/managed-by": "triton-operator"}
GRPC_PORT_NAME = "grpc"
# On a TritonServer: a new value asks for a new control key (key_secrets.py).
ROTATE_ANNOTATION = "triton-operator.io/rotate-control-key"


def _metadata(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    kept = (
        "name",
        "namespace",
        "uid",
        "generation",
        "resourceVersion",
        "labels",
        "annotations",
        "deletionTimestamp",
        "ownerReferences",
        "finalizers",
    )
    trimmed = {key: meta[key] for key in kept if key in meta}
    # kopf's last-handled annotation is a copy of the whole spec, which nothing here reads: not kept.
    trimmed["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items() if "last-handled" not in k}
    return trimmed


SHARED_STRING_LENGTH = 64  # strings up to this long are shared between index values (field names, enum values, names)


def _plain(value: Any) -> Any:
    """A copy of JSON-like data that shares its keys and short strings with every other index value: ten
    thousand models repeat the same few hundred of them, which would otherwise take much of each copy
    (bench/RESULTS.md, "Measurements behind the design")."""
    if isinstance(value, Mapping):
        return _plain_mapping(value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, str) and len(value) <= SHARED_STRING_LENGTH:
        return sys.intern(value)
    return value


def _plain_mapping(value: Mapping[str, Any]) -> dict[str, Any]:
    return {sys.intern(key): _plain(item) for key, item in value.items()}


def event_subject(view: Mapping[str, Any]) -> kopf.Body:
    """An index view or an object as read, as kopf's Events take it: they read its apiVersion, kind and
    metadata with `.get` from any mapping, though their signature names kopf's Body."""
    return cast(kopf.Body, view)


def custom_resource(body: Mapping[str, Any]) -> dict[str, Any]:
    return _plain_mapping(
        {
            "apiVersion": body.get("apiVersion"),
            "kind": body.get("kind"),
            "metadata": _metadata(body),
            "spec": body.get("spec") or {},
            "status": body.get("status") or {},
        }
    )


def section(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """One object-valued field of an object as listed; {} where it is absent or not an object. Spec and
    status are read so on the paths that must work whatever they hold (a model's index entries and its
    release): an old shape or a hand's edit is the pass's to report, not a handler's to fail on."""
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _text(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    return value if isinstance(value, str) else ""


def model_server_keys(body: Mapping[str, Any]) -> list[ServerKey]:
    """The servers a TritonModel is loaded on: serverRef, or the child named after it for an inline server;
    for a serverSelector, those its placement names (where it serves, moves to and moved from; none
    before it is placed). Read from the raw object: the index must place a model whose spec does not
    parse too."""
    meta = section(body, "metadata")
    spec = section(body, "spec")
    namespace = meta.get("namespace") or DEFAULT_NAMESPACE
    if "serverSelector" in spec:
        placement = written_placement(section(body, "status").get("placement"))
        return [(namespace, name) for name in placement_servers(placement)]
    return [(namespace, _text(section(spec, "serverRef"), "name") or meta.get("name", ""))]


def config_map_view(body: Mapping[str, Any], named: bool) -> dict[str, Any]:
    """A ConfigMap as the indexes keep it, with the uid of its controller (whose it is: ownership.py).
    One a TritonModel names for its files (`named`) and a kept revision as they are; one the operator
    made for a model's config.pbtxt only as the digest of its content, which is all its next write
    compares; any other only as its resourceVersion. Every ConfigMap in scope is watched, and each may
    hold 1 MiB of anything: only those the operator reads take memory. One a model comes to name after
    it was indexed is read then (ConfigMapFiles)."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    controller = controller_uid(body)
    ours = MANAGED_BY.items() <= labels.items()
    if ours and REVISION_PARAMETER not in labels:  # a config.pbtxt; a kept revision is read back whole
        return {"digest": config_map_digest(body), "controller": controller}
    if ours or named:
        return {
            "data": dict(body.get("data") or {}),
            "binaryData": dict(body.get("binaryData") or {}),
            "controller": controller,
        }
    return {"resourceVersion": meta.get("resourceVersion"), "controller": controller}


def unread(view: Mapping[str, Any]) -> bool:
    """A ConfigMap indexed without its content (no model named it then)."""
    return "data" not in view and "digest" not in view


def config_map_digest(config_map: Mapping[str, Any]) -> str:
    return digest([config_map.get("data") or {}, config_map.get("binaryData") or {}])


def model_config_map(body: Mapping[str, Any]) -> str | None:
    return _text(section(section(section(body, "spec"), "files"), "configMapRef"), "name") or None


def pod_view(body: Mapping[str, Any]) -> Pod:
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    port = next(
        (
            p["containerPort"]
            for c in (body.get("spec") or {}).get("containers") or []
            if c.get("name") == TRITON_CONTAINER
            for p in c.get("ports") or []
            if p.get("name") == GRPC_PORT_NAME
        ),
        None,
    )
    ip = status.get("podIP")
    running = status.get("phase", "Running") == "Running"
    address = f"{ip}:{port}" if ip and port and running else None
    ours = next(
        (c.get("status") for c in status.get("conditions") or [] if c.get("type") == MODELS_READY_CONDITION), None
    )
    restarts = [
        (c.get("name"), c.get("restartCount", 0), c.get("started")) for c in status.get("containerStatuses") or []
    ]
    owner = controller_uid(body) or ""
    deleting = bool(meta.get("deletionTimestamp"))
    fingerprint = digest([address, deleting, restarts, meta.get("uid"), owner])
    triton: Mapping[str, Any] = next(
        (c for c in status.get("containerStatuses") or [] if c.get("name") == TRITON_CONTAINER), {}
    )
    return Pod(
        meta.get("name", ""),
        meta.get("uid", ""),
        address,
        deleting,
        ours,
        fingerprint,
        owner,
        restarts=triton.get("restartCount", 0),
        last_exit=termination(triton),
    )


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def model_name_of(body: Mapping[str, Any]) -> str:
    """Triton's name for a TritonModel as listed: spec.modelName, else the object's name."""
    return _text(section(body, "spec"), "modelName") or _text(section(body, "metadata"), "name")


def touch_fingerprint(body: Mapping[str, Any]) -> str:
    """What a user changes to touch an object without changing it: its labels and annotations. Status
    writes bump resourceVersion too, so resourceVersion alone cannot tell a touch from our own writes."""
    meta = body.get("metadata") or {}
    return digest([meta.get("labels") or {}, meta.get("annotations") or {}])


def touched(event_type: str | None, before: str | None, after: str) -> bool:
    """Whether a TritonModel's event saved it again: its failed revision is then loaded once more (a
    package installed meanwhile, a file it missed put in place). `before`/`after` are its touch
    fingerprints (None: not seen before, its first listing)."""
    return event_type != "DELETED" and before is not None and before != after


def spec_fingerprint(body: Mapping[str, Any]) -> str:
    """What makes a change worth a reconcile: spec, deletion, a request to rotate the control key and a
    model's placement, not the rest of status (the workers' own writes)."""
    meta = body.get("metadata") or {}
    rotate = (meta.get("annotations") or {}).get(ROTATE_ANNOTATION)
    placement = (body.get("status") or {}).get("placement")
    return digest([body.get("spec"), bool(meta.get("deletionTimestamp")), meta.get("generation"), rotate, placement])


@dataclass
class Indexes:
    """kopf's indexes, as handlers receive them (the same live objects every call)."""

    servers: kopf.Index[ServerKey, dict[str, Any]]
    models: kopf.Index[ServerKey, dict[str, Any]]
    pods: kopf.Index[ServerKey, Pod]
    config_maps: kopf.Index[tuple[str, str], dict[str, Any]]
    models_by_config_map: kopf.Index[
        tuple[str, str], tuple[ServerKey, ...]
    ]  # a ConfigMap -> the servers of each model naming it
    selector_models: kopf.Index[str, dict[str, Any]]  # namespace -> its models with a serverSelector, placed or not
    replica_sets: kopf.Index[tuple[str, str], str]  # (namespace, uid) -> the uid of its controller (a Deployment)
    deployments: kopf.Index[tuple[str, str], str]  # (namespace, uid) -> the uid of its controller (a TritonServer)

    def server(self, key: ServerKey) -> dict[str, Any] | None:
        return next(iter(self.servers.get(key, [])), None)

    def models_of(self, key: ServerKey) -> list[dict[str, Any]]:
        return sorted(self.models.get(key, []), key=lambda body: body["metadata"]["name"])

    def servers_in(self, namespace: str) -> list[dict[str, Any]]:
        return sorted(
            (body for (ns, _), store in self.servers.items() if ns == namespace for body in store),
            key=lambda body: body["metadata"]["name"],
        )

    def pods_of(self, key: ServerKey) -> list[Pod]:
        """The server's pods: those whose owner chain leads to it, Pod -> ReplicaSet -> Deployment -> the
        TritonServer, each link an object's controller ownerReference. Their labels are anyone's to copy,
        and a pod of the server's is sent the control key."""
        server = _text(section(self.server(key) or {}, "metadata"), "uid")
        return sorted(
            (pod for pod in self.pods.get(key, []) if server and self._controller(key[0], pod.owner) == server),
            key=lambda pod: pod.name,
        )

    def _controller(self, namespace: str, pod_owner: str) -> str:
        """The uid of the controller of the Deployment that controls the ReplicaSet `pod_owner`; "" where a
        link is missing (not a ReplicaSet or Deployment the operator watches, or none)."""
        replica_set = next(iter(self.replica_sets.get((namespace, pod_owner), [])), "")
        return next(iter(self.deployments.get((namespace, replica_set), [])), "")

    def config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return next(iter(self.config_maps.get((namespace, name), [])), None)
