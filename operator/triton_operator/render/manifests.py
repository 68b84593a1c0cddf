"""Kubernetes objects for a TritonServer and its models: pure dicts, applied by k8s/."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..api.resources import ObjectMeta, TritonModel, TritonServer
from ..api.types import API_VERSION, parse_quantity
from ..protocol.names import REVISION_PARAMETER
from . import args as server_flags
from . import drain
from .shm import ShmPlan

MODELS_READY_CONDITION = "triton-operator.io/models-ready"
# On the Deployment: a hash of its pod template (a change rolls the pods) and its /dev/shm bytes.
TEMPLATE_HASH_ANNOTATION = "triton-operator.io/pod-template-hash"
SHM_BYTES_ANNOTATION = "triton-operator.io/shm-bytes"
# On the pod template: a digest of the control key the pods are started with, so a new key rolls them
# (they read it from the Secret only as they start).
CONTROL_KEY_DIGEST_ANNOTATION = "triton-operator.io/control-key-digest"
CONTROL_KEY_ENV = "TRITON_OPERATOR_CONTROL_KEY"
CONTROL_SECRET_KEY = "control-key"
SHM_VOLUME = "dshm"
CONTAINER = "tritonserver"
NON_ROOT_ID = 1000
GCS_CREDENTIALS_DIR = "/var/run/secrets/triton-operator/model-repository"


def byte_quantity(count: int) -> str:
    """A Kubernetes quantity a person can read: 1096Mi rather than 1149239296."""
    for suffix, unit in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if count and count % unit == 0:
            return f"{count // unit}{suffix}"
    return str(count)


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


def _object_meta(name: str, owner_kind: str, owner: ObjectMeta, labels: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if owner.namespace:
        meta["namespace"] = owner.namespace
    references = _owner_references(owner_kind, owner)
    if references:
        meta["ownerReferences"] = references
    return meta


def server_child_meta(server: TritonServer) -> dict[str, Any]:
    """Metadata of an object named after the server and owned by it (garbage-collected with it)."""
    return _object_meta(server.name, "TritonServer", server.metadata, server_labels(server))


def control_secret_name(server: TritonServer) -> str:
    return f"{server.name}-control"


def config_map_name(model: TritonModel) -> str:
    return f"{model.name}-config"


# On a Secret rendered without its key: the operator generates the key and fills it in.
CONTROL_KEY_PLACEHOLDER_ANNOTATION = "triton-operator.io/control-key"
CONTROL_KEY_PLACEHOLDER = "filled-by-operator"


def control_secret(server: TritonServer, control_key: str | None) -> dict[str, Any]:
    """The Secret holding the key that unlocks the model-repository API; the key is made by the caller.

    Without a key the Secret is a placeholder (no data, an annotation saying so) that the operator
    fills: rendered output then stays the same from run to run, and no key is ever written to a file.
    """
    secret: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _object_meta(control_secret_name(server), "TritonServer", server.metadata, server_labels(server)),
        "type": "Opaque",
    }
    if control_key is None:
        secret["metadata"]["annotations"] = {CONTROL_KEY_PLACEHOLDER_ANNOTATION: CONTROL_KEY_PLACEHOLDER}
    else:
        secret["data"] = {CONTROL_SECRET_KEY: base64.b64encode(control_key.encode()).decode()}
    return secret


def control_key_digest(control_key: str) -> str:
    """What the pod template records of the key: enough to tell keys apart, nothing to recover one."""
    return _digest(control_key)


def model_labels(model: TritonModel) -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": "triton-operator", "triton-operator.io/model": model.name}


def model_child_meta(name: str, model: TritonModel, labels: dict[str, str]) -> dict[str, Any]:
    """Metadata of an object owned by the model (garbage-collected with it)."""
    return _object_meta(name, "TritonModel", model.metadata, labels)


def model_config_map(model: TritonModel, revision: str, pbtxt: str) -> dict[str, Any]:
    """The rendered config.pbtxt, kept so users can read exactly what runs."""
    meta = model_child_meta(config_map_name(model), model, model_labels(model))
    meta["annotations"] = {REVISION_PARAMETER: revision}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"config.pbtxt": pbtxt}}


def child_server_object(server: TritonServer, owner: TritonModel) -> dict[str, Any]:
    """The TritonServer object the operator creates for a model's inline `server:`."""
    meta = _object_meta(server.name, "TritonModel", owner.metadata, dict(server.metadata.labels))
    return {
        "apiVersion": API_VERSION,
        "kind": "TritonServer",
        "metadata": meta,
        "spec": server.spec.model_dump(mode="json", by_alias=True, exclude_defaults=True),
    }


def service(server: TritonServer) -> dict[str, Any]:
    meta = _object_meta(server.name, "TritonServer", server.metadata, server_labels(server))
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


def _memory_with_shm(resources: dict[str, Any], shm_bytes: int) -> dict[str, Any]:
    """tmpfs pages count against the container's memory cgroup: add /dev/shm to request and limit.

    The request always grows by the shm size (the node must have it); a limit only where one is set.
    """
    requests = dict(resources.get("requests") or {})
    limits = dict(resources.get("limits") or {})
    requests["memory"] = byte_quantity(int(parse_quantity(requests.get("memory", 0))) + shm_bytes)
    if "memory" in limits:
        limits["memory"] = byte_quantity(int(parse_quantity(limits["memory"])) + shm_bytes)
    result = {**resources, "requests": requests}
    if limits:
        result["limits"] = limits
    return result


@dataclass
class _RepositoryAccess:
    """What the container needs to reach its model repository."""

    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    env: list[dict[str, Any]] = field(default_factory=list)
    env_from: list[dict[str, Any]] = field(default_factory=list)


def _repository_access(server: TritonServer) -> _RepositoryAccess:
    """An emptyDir (models come with load requests), a PVC, or cloud credentials for a URI."""
    repository = server.spec.model_repository
    path = server_flags.MODEL_REPOSITORY_PATH
    if repository.pvc is not None:
        claim = repository.pvc
        mount: dict[str, Any] = {"name": "models", "mountPath": path, "readOnly": claim.read_only}
        if claim.sub_path:
            mount["subPath"] = claim.sub_path
        volume = {"name": "models", "persistentVolumeClaim": {"claimName": claim.claim_name, "readOnly": claim.read_only}}
        return _RepositoryAccess([volume], [mount])
    if repository.uri is None:
        return _RepositoryAccess([{"name": "models", "emptyDir": {}}], [{"name": "models", "mountPath": path}])
    if repository.credentials_secret_ref is None:
        return _RepositoryAccess()
    secret = repository.credentials_secret_ref.name
    if repository.uri.startswith("gs://"):
        return _RepositoryAccess(
            volumes=[{"name": "repository-credentials", "secret": {"secretName": secret}}],
            mounts=[{"name": "repository-credentials", "mountPath": GCS_CREDENTIALS_DIR, "readOnly": True}],
            env=[{"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": f"{GCS_CREDENTIALS_DIR}/credentials.json"}],
        )
    return _RepositoryAccess(env_from=[{"secretRef": {"name": secret}}])


# The restricted Pod Security Standard's settings, what a pod gets unless its spec says otherwise.
RESTRICTED_POD_SECURITY_CONTEXT: Mapping[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": NON_ROOT_ID,
    "runAsGroup": NON_ROOT_ID,
    "fsGroup": NON_ROOT_ID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_CONTAINER_SECURITY_CONTEXT: Mapping[str, Any] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def merged_over(defaults: Mapping[str, Any], given: Mapping[str, Any] | None) -> dict[str, Any]:
    """`given` over `defaults`, field by field at every depth: what the user sets wins and every default
    they leave out stays (`fsGroup: 2000` alone keeps runAsNonRoot and the seccomp profile). Lists and
    other values are replaced whole."""
    merged = dict(defaults)
    for key, value in (given or {}).items():
        default = merged.get(key)
        merged[key] = merged_over(default, value) if isinstance(default, Mapping) and isinstance(value, Mapping) else value
    return merged


def _container(server: TritonServer, shm: ShmPlan, repository: _RepositoryAccess) -> dict[str, Any]:
    spec = server.spec
    env = [
        {
            "name": CONTROL_KEY_ENV,
            "valueFrom": {"secretKeyRef": {"name": control_secret_name(server), "key": CONTROL_SECRET_KEY}},
        },
        *repository.env,
    ]
    resources = _memory_with_shm(spec.resources.as_kubernetes() if spec.resources else {}, shm.size_limit_bytes)
    if spec.gpus.count:
        resources["limits"] = {**resources.get("limits", {}), spec.gpus.resource_name: str(spec.gpus.count)}
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        "command": ["tritonserver"],
        "args": server_flags.server_args(spec, control_key=f"$({CONTROL_KEY_ENV})"),
        "env": env,
        "ports": [
            {"name": "http", "containerPort": server_flags.HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": server_flags.GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": server_flags.METRICS_PORT, "protocol": "TCP"},
        ],
        "livenessProbe": {
            "httpGet": {"path": "/v2/health/live", "port": "http"},
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        # Non-strict readiness: the server is up; whether its models are loaded is the readinessGate.
        "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": "http"}, "periodSeconds": 5},
        "startupProbe": {
            "httpGet": {"path": "/v2/health/live", "port": "http"},
            "periodSeconds": 5,
            "failureThreshold": 60,
        },
        "resources": resources,
        "volumeMounts": [
            {"name": SHM_VOLUME, "mountPath": "/dev/shm"},
            {"name": "tmp", "mountPath": "/tmp"},
            *repository.mounts,
        ],
        "securityContext": merged_over(RESTRICTED_CONTAINER_SECURITY_CONTEXT, spec.pod.container_security_context),
    }
    if repository.env_from:
        container["envFrom"] = repository.env_from
    if delay := drain.pre_stop_seconds(spec):
        # Serve on while the pod leaves the Service: SIGTERM only once no client can reach it (an exec of
        # sleep, which the Triton image has, works on every Kubernetes version; the sleep action needs 1.30).
        container["lifecycle"] = {"preStop": {"exec": {"command": ["sleep", str(delay)]}}}
    return container


def _with_shm_mount(sidecar: dict[str, Any]) -> dict[str, Any]:
    """Sidecars share Triton's /dev/shm, so their system-shm regions are visible to Triton."""
    mounts = list(sidecar.get("volumeMounts") or [])
    if not any(mount.get("mountPath") == "/dev/shm" for mount in mounts):
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    return {**sidecar, "volumeMounts": mounts}


def deployment(server: TritonServer, shm: ShmPlan, key_digest: str | None = None) -> dict[str, Any]:
    """The server's pods; `key_digest` (of the control key, when one is known) goes into the pod
    template, so the pods roll when the key changes."""
    spec = server.spec
    pod = spec.pod
    labels = server_labels(server)
    repository = _repository_access(server)
    pod_spec: dict[str, Any] = {
        "containers": [_container(server, shm, repository), *[_with_shm_mount(sidecar) for sidecar in pod.sidecars or []]],
        "readinessGates": [{"conditionType": MODELS_READY_CONDITION}],
        "terminationGracePeriodSeconds": drain.termination_grace_seconds(spec),
        "securityContext": merged_over(RESTRICTED_POD_SECURITY_CONTEXT, pod.security_context),
        # Triton never calls the Kubernetes API: no token in the pod for whoever gets code to run in it.
        "automountServiceAccountToken": pod.automount_service_account_token,
        "volumes": [
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": byte_quantity(shm.size_limit_bytes)}},
            {"name": "tmp", "emptyDir": {}},
            *repository.volumes,
        ],
    }
    optional = {
        "nodeSelector": dict(pod.node_selector) or None,
        "tolerations": pod.tolerations,
        "affinity": pod.affinity,
        "imagePullSecrets": [{"name": ref.name} for ref in pod.image_pull_secrets] or None,
        "serviceAccountName": pod.service_account_name,
        "priorityClassName": pod.priority_class_name,
        "runtimeClassName": pod.runtime_class_name,
    }
    pod_spec.update({key: value for key, value in optional.items() if value})
    template_meta: dict[str, Any] = {"labels": {**pod.labels, **labels}}
    annotations = {**pod.annotations, **({CONTROL_KEY_DIGEST_ANNOTATION: key_digest} if key_digest else {})}
    if annotations:
        template_meta["annotations"] = annotations
    template = {"metadata": template_meta, "spec": pod_spec}
    meta = _object_meta(server.name, "TritonServer", server.metadata, labels)
    meta["annotations"] = {TEMPLATE_HASH_ANNOTATION: _digest(template), SHM_BYTES_ANNOTATION: str(shm.size_limit_bytes)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": template,
        },
    }


def deployment_keeping_shm(server: TritonServer, shm: ShmPlan, deployed: Mapping[str, Any] | None, key_digest: str | None = None) -> dict[str, Any]:
    """The Deployment, with an automatic /dev/shm that grows with the models but never shrinks by itself.

    A smaller size alone would restart every pod for nothing (a model went away); it is taken
    only when the pod template changes for another reason and the pods roll anyway.
    """
    wanted = deployment(server, shm, key_digest)
    annotations = ((deployed or {}).get("metadata") or {}).get("annotations") or {}
    deployed_bytes = int(annotations.get(SHM_BYTES_ANNOTATION, 0))
    if server.spec.shared_memory.size_limit != "auto" or deployed_bytes <= shm.size_limit_bytes:
        return wanted
    kept = deployment(server, dataclasses.replace(shm, size_limit_bytes=deployed_bytes), key_digest)
    same_template = kept["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION] == annotations.get(TEMPLATE_HASH_ANNOTATION)
    return kept if same_template else wanted


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]
