"""A TritonServer's pods as a Deployment: pure dicts, applied by k8s/.

Its own module because the pod is where most of a server's spec lands: the tritonserver container
(flags, keys from the Secrets, probes, memory sized from its models plus /dev/shm, the model
repository's volume or credentials, the drain's preStop), the user's sidecars and the memory
sidecar, the restricted security contexts under the user's own, and the annotations that decide when
the pods roll. The objects around it (Secrets, Service, NetworkPolicy) are render/manifests.py's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..api.pod_resources import GPU_PRODUCT_LABEL
from ..api.resources import TritonServer
from ..api.security import (
    MEMORY_READER_CONTAINER,
    RESTRICTED_CONTAINER_SECURITY_CONTEXT,
    RESTRICTED_POD_SECURITY_CONTEXT,
    TRITON_CONTAINER,
    merged_over,
)
from ..api.server import TritonServerSpec
from ..api.types import parse_quantity
from ..protocol.names import READER_PORT
from . import args as server_flags
from . import drain
from .manifests import (
    CONTROL_KEY,
    KEY_SECRETS,
    MEMORY_PORT_NAME,
    SHM_KEY,
    KeySecret,
    object_meta,
    server_labels,
    short_digest,
)
from .shm import ShmPlan
from .sizing import PodMemory

MODELS_READY_CONDITION = "triton-operator.io/models-ready"
# On the Deployment: a hash of its pod template (a change rolls the pods) and its /dev/shm bytes.
TEMPLATE_HASH_ANNOTATION = "triton-operator.io/pod-template-hash"
SHM_BYTES_ANNOTATION = "triton-operator.io/shm-bytes"
# And the models' memory its pods were sized for, where derived.
MODELS_MEMORY_ANNOTATION = "triton-operator.io/models-memory-bytes"
SHM_VOLUME = "dshm"
GCS_CREDENTIALS_DIR = "/var/run/secrets/triton-operator/model-repository"


def byte_quantity(count: int) -> str:
    """A Kubernetes quantity a person can read: 1096Mi rather than 1149239296."""
    for suffix, unit in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if count and count % unit == 0:
            return f"{count // unit}{suffix}"
    return str(count)


def node_selector(spec: TritonServerSpec) -> dict[str, str]:
    """pod.nodeSelector, with the GPU feature discovery's product label where gpus.product names one; a
    product label the user sets in pod.nodeSelector wins (validation warns where the two differ)."""
    product = {GPU_PRODUCT_LABEL: spec.gpus.product} if spec.gpus.product is not None else {}
    return {**product, **spec.pod.node_selector}


def _memory_resources(resources: dict[str, Any], shm_bytes: int, sized: PodMemory | None) -> dict[str, Any]:
    """The container's memory: derived from its models where `sized`, else the user's; /dev/shm on top of
    both, since tmpfs pages count against the container's memory cgroup.

    The request always grows by the shm size (the node must have it); a limit only where one is set or
    derived.
    """
    requests = dict(resources.get("requests") or {})
    limits = dict(resources.get("limits") or {})
    if sized is not None:
        requests["memory"] = byte_quantity(sized.bytes + shm_bytes)
        if sized.limited:
            limits["memory"] = byte_quantity(sized.bytes + shm_bytes)
    else:
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
        volume = {
            "name": "models",
            "persistentVolumeClaim": {"claimName": claim.claim_name, "readOnly": claim.read_only},
        }
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


def _container(
    server: TritonServer, shm: ShmPlan, memory: PodMemory | None, repository: _RepositoryAccess
) -> dict[str, Any]:
    spec = server.spec
    env = [
        *(
            {
                "name": which.env,
                "valueFrom": {"secretKeyRef": {"name": which.secret_name(server), "key": which.data_key}},
            }
            for which in KEY_SECRETS
        ),
        *repository.env,
    ]
    resources = _memory_resources(
        spec.resources.as_kubernetes() if spec.resources else {}, shm.size_limit_bytes, memory
    )
    if spec.gpus.count:
        resources["limits"] = {**resources.get("limits", {}), spec.gpus.resource_name: str(spec.gpus.count)}
    container: dict[str, Any] = {
        "name": TRITON_CONTAINER,
        "image": spec.image,
        "command": ["tritonserver"],
        "args": server_flags.server_args(
            spec,
            control_key=f"$({CONTROL_KEY.env})",
            shm_key=f"$({SHM_KEY.env})",
            literal=server_flags.kubernetes_literal,
        ),
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


def _memory_reader(server: TritonServer) -> dict[str, Any]:
    """The memory sidecar (memory/sidecar.py): it reads the stubs' /proc, so the pod shares its process
    namespace, and needs no more than the restricted context: the stubs run as the same user."""
    reader = server.spec.memory_reader
    return {
        "name": MEMORY_READER_CONTAINER,
        "image": reader.image,
        "command": ["triton-operator", "memory-sidecar", f"--port={READER_PORT}"],
        "ports": [{"name": MEMORY_PORT_NAME, "containerPort": READER_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": merged_over(RESTRICTED_CONTAINER_SECURITY_CONTEXT, None),
    }


def deployment(
    server: TritonServer, shm: ShmPlan, memory: PodMemory | None, key_digests: Mapping[KeySecret, str] | None = None
) -> dict[str, Any]:
    """The server's pods, their memory derived from the models they hold (`memory`; None where the user
    sets it); `key_digests` (of the keys, when they are known) go into the pod template, so the pods roll
    when a key changes."""
    spec = server.spec
    pod = spec.pod
    labels = server_labels(server)
    repository = _repository_access(server)
    pod_spec: dict[str, Any] = {
        "containers": [
            _container(server, shm, memory, repository),
            *[_with_shm_mount(sidecar) for sidecar in pod.sidecars or []],
        ],
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
        "nodeSelector": node_selector(spec) or None,
        "tolerations": pod.tolerations,
        "affinity": pod.affinity,
        "imagePullSecrets": [{"name": ref.name} for ref in pod.image_pull_secrets] or None,
        "serviceAccountName": pod.service_account_name,
        "priorityClassName": pod.priority_class_name,
        "runtimeClassName": pod.runtime_class_name,
    }
    pod_spec.update({key: value for key, value in optional.items() if value})
    if spec.memory_reader.enabled:
        pod_spec["containers"].append(_memory_reader(server))
        pod_spec["shareProcessNamespace"] = True
    template_meta: dict[str, Any] = {"labels": {**pod.labels, **labels}}
    annotations = {
        **pod.annotations,
        **{which.digest_annotation: digest for which, digest in (key_digests or {}).items()},
    }
    if annotations:
        template_meta["annotations"] = annotations
    template = {"metadata": template_meta, "spec": pod_spec}
    meta = object_meta(server.name, "TritonServer", server.metadata, labels)
    meta["annotations"] = {
        TEMPLATE_HASH_ANNOTATION: short_digest(template),
        SHM_BYTES_ANNOTATION: str(shm.size_limit_bytes),
    }
    if memory is not None:
        meta["annotations"][MODELS_MEMORY_ANNOTATION] = str(memory.models_bytes)
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


def deployment_keeping_sizes(
    server: TritonServer,
    shm: ShmPlan,
    memory: PodMemory | None,
    deployed: Mapping[str, Any] | None,
    key_digests: Mapping[KeySecret, str] | None = None,
) -> dict[str, Any]:
    """The Deployment, with an automatic /dev/shm and a derived memory that grow with the models but never
    shrink by themselves.

    A smaller size alone would restart every pod for nothing (a model went away); it is taken
    only when the pod template changes for another reason and the pods roll anyway.
    """
    wanted = deployment(server, shm, memory, key_digests)
    annotations = ((deployed or {}).get("metadata") or {}).get("annotations") or {}
    if server.spec.shared_memory.size_limit == "auto":
        shm = dataclasses.replace(
            shm, size_limit_bytes=max(shm.size_limit_bytes, int(annotations.get(SHM_BYTES_ANNOTATION, 0)))
        )
    if memory is not None:
        memory = dataclasses.replace(
            memory, models_bytes=max(memory.models_bytes, int(annotations.get(MODELS_MEMORY_ANNOTATION, 0)))
        )
    kept = deployment(server, shm, memory, key_digests)
    same_template = kept["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION] == annotations.get(
        TEMPLATE_HASH_ANNOTATION
    )
    return kept if same_template else wanted
