"""Kubernetes objects for a TritonServer and its models, but the Deployment: pure dicts, applied by k8s/.

Here: the metadata every child object shares (labels, owner references), the server's two key
Secrets, its Service and NetworkPolicy (who reaches its pods), a model's ConfigMap and the child
TritonServer of an inline `server:`. The pods themselves are render/deployment.py's.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ..api.resources import ObjectMeta, TritonModel, TritonServer
from ..api.traffic import NAMESPACE_NAME_LABEL, NetworkPeer
from ..api.types import API_VERSION
from ..protocol.names import REVISION_PARAMETER
from . import args as server_flags

# The memory sidecar's port, by name: the NetworkPolicy lets the operator in to it.
MEMORY_PORT_NAME = "memory"


def _owner_references(kind: str, metadata: ObjectMeta) -> list[dict[str, Any]]:
    """Owner references need the owner's uid; objects rendered from files (no uid) get none."""
    if not metadata.uid:
        return []
    return [
        {
            "apiVersion": API_VERSION,
            "kind": kind,
            "name": metadata.name,
            "uid": metadata.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def server_labels(server: TritonServer) -> dict[str, str]:
    """Labels that select the server's pods; never change them (Deployment selectors are immutable)."""
    return {
        "app.kubernetes.io/name": "tritonserver",
        "app.kubernetes.io/instance": server.name,
        "app.kubernetes.io/managed-by": "triton-operator",
    }


def object_meta(name: str, owner_kind: str, owner: ObjectMeta, labels: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if owner.namespace:
        meta["namespace"] = owner.namespace
    references = _owner_references(owner_kind, owner)
    if references:
        meta["ownerReferences"] = references
    return meta


def server_child_meta(server: TritonServer) -> dict[str, Any]:
    """Metadata of an object named after the server and owned by it (garbage-collected with it)."""
    return object_meta(server.name, "TritonServer", server.metadata, server_labels(server))


def config_map_name(model: TritonModel) -> str:
    return f"{model.name}-config"


@dataclass(frozen=True)
class KeySecret:
    """One of a server's two keys: the Secret that holds it, and the variable the pod reads it into.

    The operator's key (control) unlocks loading and unloading models, model configs, statistics,
    trace and logging settings; the sidecars' key (shm) unlocks shared-memory registration only, so a
    client in the pod can be given it without being able to change what the server runs.
    """

    name: str  # the Secret is <server>-<name>, its data key <name>-key
    env: str

    @property
    def data_key(self) -> str:
        return f"{self.name}-key"

    @property
    def digest_annotation(self) -> str:
        """On the pod template: a digest of the key the pods start with, so a new key rolls them (they
        read it from the Secret only as they start)."""
        return f"triton-operator.io/{self.name}-key-digest"

    def secret_name(self, server: TritonServer) -> str:
        return f"{server.name}-{self.name}"


CONTROL_KEY = KeySecret("control", "TRITON_OPERATOR_CONTROL_KEY")
SHM_KEY = KeySecret("shm", "TRITON_SHM_KEY")
KEY_SECRETS = (CONTROL_KEY, SHM_KEY)

# On a Secret rendered without its key: the operator generates the key and fills it in.
KEY_PLACEHOLDER_ANNOTATION = "triton-operator.io/key"
KEY_PLACEHOLDER = "filled-by-operator"


def key_secret(server: TritonServer, which: KeySecret, key: str | None) -> dict[str, Any]:
    """The Secret holding one of the server's keys; the key is made by the caller.

    Without a key the Secret is a placeholder (no data, an annotation saying so) that the operator
    fills: rendered output then stays the same from run to run, and no key is ever written to a file.
    """
    secret: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(which.secret_name(server), "TritonServer", server.metadata, server_labels(server)),
        "type": "Opaque",
    }
    if key is None:
        secret["metadata"]["annotations"] = {KEY_PLACEHOLDER_ANNOTATION: KEY_PLACEHOLDER}
    else:
        secret["data"] = {which.data_key: base64.b64encode(key.encode()).decode()}
    return secret


def key_digest(key: str) -> str:
    """What the pod template records of a key: enough to tell keys apart, nothing to recover one."""
    return short_digest(key)


def model_labels(model: TritonModel) -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": "triton-operator", "triton-operator.io/model": model.name}


def model_child_meta(name: str, model: TritonModel, labels: dict[str, str]) -> dict[str, Any]:
    """Metadata of an object owned by the model (garbage-collected with it)."""
    return object_meta(name, "TritonModel", model.metadata, labels)


def model_config_map(model: TritonModel, revision: str, pbtxt: str) -> dict[str, Any]:
    """The rendered config.pbtxt, kept so users can read exactly what runs."""
    meta = model_child_meta(config_map_name(model), model, model_labels(model))
    meta["annotations"] = {REVISION_PARAMETER: revision}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"config.pbtxt": pbtxt}}


def child_server_object(server: TritonServer, owner: TritonModel) -> dict[str, Any]:
    """The TritonServer object the operator creates for a model's inline `server:`."""
    meta = object_meta(server.name, "TritonModel", owner.metadata, dict(server.metadata.labels))
    return {
        "apiVersion": API_VERSION,
        "kind": "TritonServer",
        "metadata": meta,
        "spec": server.spec.model_dump(mode="json", by_alias=True, exclude_defaults=True),
    }


def service(server: TritonServer) -> dict[str, Any]:
    meta = object_meta(server.name, "TritonServer", server.metadata, server_labels(server))
    if server.spec.service.annotations:
        meta["annotations"] = dict(server.spec.service.annotations)
    ports = [
        ("http", server_flags.HTTP_PORT),
        ("grpc", server_flags.GRPC_PORT),
        ("metrics", server_flags.METRICS_PORT),
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": server.spec.service.type,
            "selector": server_labels(server),
            "ports": [{"name": name, "port": port, "targetPort": name, "protocol": "TCP"} for name, port in ports],
        },
    }


# How the chart deploys the operator by default; the operator's settings say where it runs otherwise.
OPERATOR_NAMESPACE = "triton-operator"
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "triton-operator"}
OPERATOR_PEER = NetworkPeer(namespace_labels={NAMESPACE_NAME_LABEL: OPERATOR_NAMESPACE}, pod_labels=OPERATOR_POD_LABELS)


def _peer(peer: NetworkPeer) -> dict[str, Any]:
    """A NetworkPolicy peer: a pod selector alone means the policy's own namespace."""
    rendered: dict[str, Any] = {"podSelector": {"matchLabels": dict(peer.pod_labels)} if peer.pod_labels else {}}
    if peer.namespace_labels is not None:
        rendered["namespaceSelector"] = {"matchLabels": dict(peer.namespace_labels)} if peer.namespace_labels else {}
    return rendered


def _ingress(peers: list[NetworkPeer], *ports: str) -> dict[str, Any]:
    return {"from": [_peer(peer) for peer in peers], "ports": [{"protocol": "TCP", "port": port} for port in ports]}


def network_policy(server: TritonServer, operator: NetworkPeer = OPERATOR_PEER) -> list[dict[str, Any]]:
    """Who reaches the server's pods, port by port: inference (HTTP and gRPC) from the peers the spec
    names, gRPC from the operator (its control path) and the memory sidecar's port (its reading),
    metrics from monitoring; nothing else. Ports are named, so the policy follows the container's.
    None when the spec turns it off.

    A policy cannot tell Triton's APIs apart on one port: inference clients reach the administrative
    APIs too, which answer only to keys (render/args.py)."""
    settings = server.spec.network_policy
    if not settings.enabled:
        return []
    rules = [
        _ingress(settings.inference_from, "http", "grpc"),
        _ingress([operator], "grpc", *([MEMORY_PORT_NAME] if server.spec.memory_reader.enabled else [])),
        _ingress(settings.metrics_from, "metrics"),
    ]
    return [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": object_meta(server.name, "TritonServer", server.metadata, server_labels(server)),
            "spec": {
                "podSelector": {"matchLabels": server_labels(server)},
                "policyTypes": ["Ingress"],
                "ingress": [rule for rule in rules if rule["from"]],
            },
        }
    ]


def short_digest(value: Any) -> str:
    """A digest of a JSON value, short enough for an annotation: it tells values apart, nothing more."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]
