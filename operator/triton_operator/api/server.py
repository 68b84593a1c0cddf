"""`TritonServer.spec`: a fleet of Triton pods with typed server settings."""

import re
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BeforeValidator,
    Field,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from .rollout import RolloutSpec
from .types import (
    BYTE_QUANTITY_PATTERN,
    QUANTITY_PATTERN,
    ApiModel,
    ByteQuantity,
    KubernetesObject,
    KubernetesObjectList,
    LocalObjectReference,
    MiB,
    PlainText,
    bytes_from_quantity,
    kubernetes_object_field,
    quantity,
    with_cel_rules,
    without_control_characters,
)

# Triton 25.07 (server 2.59.1 in NVIDIA's numbering): the release that fixed the August 2025 advisories
# (api/security.py). By tag: no registry answers here to confirm a digest for it.
DEFAULT_IMAGE = "nvcr.io/nvidia/tritonserver:25.07-py3"
# The operator's image as the chart installs it by default (image.repository, tag the appVersion).
OPERATOR_IMAGE = "triton-operator:0.1.0"
# Backends of NVIDIA's full tritonserver image (`/opt/tritonserver/backends`).
FULL_IMAGE_BACKENDS = (
    "dali",
    "fil",
    "identity",
    "onnxruntime",
    "openvino",
    "python",
    "pytorch",
    "repeat",
    "square",
    "tensorflow",
    "tensorrt",
)
# Flags the operator owns: setting them through extraArgs would break what it relies on.
OWNED_FLAGS = {
    "--model-control-mode": "the operator always runs explicit model control",
    "--model-repository": "use spec.modelRepository",
    "--strict-readiness": "readiness is gated per pod by the operator",
    "--http-restricted-api": "the control API key comes from the operator's Secret",
    "--grpc-restricted-protocol": "the control API key comes from the operator's Secret",
    "--http-port": "ports are fixed in the pod (8000, 8001, 8002)",
    "--grpc-port": "ports are fixed in the pod (8000, 8001, 8002)",
    "--metrics-port": "ports are fixed in the pod (8000, 8001, 8002)",
    "--exit-timeout-secs": "use spec.exitTimeoutSeconds",
    "--pinned-memory-pool-byte-size": "use spec.memoryPools.pinnedBytes",
    "--cuda-memory-pool-byte-size": "use spec.memoryPools.cudaBytesPerGpu",
    "--model-load-thread-count": "use spec.modelLoadThreadCount",
    "--disable-auto-complete-config": "the operator always sends a complete config",
    "--log-verbose": "use spec.logging",
    "--log-info": "use spec.logging",
    "--log-warning": "use spec.logging",
    "--log-error": "use spec.logging",
    "--log-format": "use spec.logging",
}
BACKEND_CONFIG_FLAG = "--backend-config"
# The python backend's shm settings size /dev/shm: they come from spec.pythonBackend only.
OWNED_BACKEND_CONFIG = r"^python,shm-(default|growth)-byte-size="


def _prefixes_pattern(flag: str) -> str:
    """A regex (RE2 and Python alike; no escapes, which CEL's string literals would refuse) of every spelling
    Triton may read as `flag`: `--` and any non-empty prefix of its name, e.g. --m(o(d(e)?)?)? for --mode."""
    name = flag.removeprefix("--")
    assert re.fullmatch("[a-z-]+", name), flag
    pattern = ""
    for character in reversed(name[1:]):
        pattern = f"({character}{pattern})?"
    return f"--{name[0]}{pattern}"


# Triton reads its options with getopt_long: `--flag=value` and `--flag value` alike, and any unambiguous
# prefix of a long option as that option (the wheel's 2.51: `--model-cont=poll` ran in MODE_POLL, `--p=1048576`
# set the pinned pool, `--d` turned auto-complete off). Which prefixes are unambiguous depends on the options
# of the image's Triton, so every prefix of an owned flag is refused: the ambiguous ones Triton refuses itself,
# and none is a whole option of its own (checked against the wheel's options).
OWNED_FLAG_PATTERN = f"^({'|'.join(_prefixes_pattern(flag) for flag in OWNED_FLAGS)})(=|$)"
# The python shm sizes, as `--backend-config=python,shm-...` or as the value after a `--backend-config`.
OWNED_BACKEND_CONFIG_ARG = f"^(({_prefixes_pattern(BACKEND_CONFIG_FLAG)})=)?{OWNED_BACKEND_CONFIG.removeprefix('^')}"


def owned_flags_of(arg: str) -> list[str]:
    """The owned flags an extraArgs item may stand for to Triton (any prefix of one, with or without
    `=value`), in OWNED_FLAGS' order; [] for anything else."""
    flag = arg.partition("=")[0]
    if not flag.startswith("--") or len(flag) < 3:
        return []
    return [owned for owned in OWNED_FLAGS if owned.startswith(flag)]


def owned_arg_problem(arg: str) -> str:
    """Why the operator refuses this extraArgs item, or "": it names (a prefix of) an owned flag, or sets
    the python backend's shm sizes."""
    if owned := owned_flags_of(arg):
        flag = arg.partition("=")[0]
        reasons = "; ".join(dict.fromkeys(OWNED_FLAGS[name] for name in owned))
        if flag in OWNED_FLAGS:
            return f"{flag} ({reasons})"
        return f"{flag} (a prefix of {' or '.join(owned)}, which Triton takes for the whole flag: {reasons})"
    if re.match(OWNED_BACKEND_CONFIG_ARG, arg):
        return f"{arg} (the python shm sizes size /dev/shm: use spec.pythonBackend)"
    return ""


S3_GS_AZURE_URI = r"^(s3|gs|as)://[^\x00-\x1f\x7f]+$"
# Token streams of language models run for minutes; what a pod carries to its end unless told otherwise.
DEFAULT_MAX_REQUEST_SECONDS = 120


def _is_quantity(value: Any) -> Any:
    quantity(value)
    return value


# A quantity kept as written (Kubernetes takes it as is), refused when it is not one.
Quantity = Annotated[
    int | str,
    BeforeValidator(_is_quantity),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN}),
]
ResourceList = Annotated[
    dict[Annotated[str, StringConstraints(min_length=1)], Quantity],
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": 32,
            "additionalProperties": {"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN},
        }
    ),
]


def _extended(resource: str) -> bool:
    """Extended resources (nvidia.com/gpu, ...) are counted in whole units, as Kubernetes requires."""
    return "/" in resource and not resource.startswith("kubernetes.io/")


def _resource_list_rules(field: str) -> list[tuple[str, str]]:
    present = f"!has(self.{field})"
    return [
        (
            f"{present} || !('memory' in self.{field}) || string(self.{field}.memory).matches('{BYTE_QUANTITY_PATTERN}')",
            f"{field}.memory must be whole bytes within int64, e.g. 512Mi or 2Gi (m means thousandths)",
        ),
        (
            f"{present} || self.{field}.all(k, !k.contains('/') || k.startsWith('kubernetes.io/') "
            f"|| string(self.{field}[k]).matches('^[0-9]+$'))",
            f"extended resources in {field} (e.g. nvidia.com/gpu) are whole numbers",
        ),
    ]


class ResourceRequirements(ApiModel):
    """Container requests and limits; quantities are checked here, before any pod is refused for them."""

    model_config = with_cel_rules(*_resource_list_rules("requests"), *_resource_list_rules("limits"))

    requests: ResourceList | None = Field(default=None, description="cpu, memory and extended resources requested.")
    limits: ResourceList | None = Field(default=None, description="cpu, memory and extended resources at most used.")
    claims: KubernetesObjectList | None = kubernetes_object_field("Dynamic resource claims.")

    @field_validator("requests", "limits")
    @classmethod
    def _whole_units(cls, resources: dict[str, int | str] | None) -> dict[str, int | str] | None:
        """Memory in whole bytes within int64; extended resources in whole units."""
        problems = []
        for name, value in (resources or {}).items():
            if name == "memory":
                try:
                    bytes_from_quantity(value)
                except ValueError as error:
                    problems.append(f"memory: {error}")
            elif _extended(name) and quantity(value) != quantity(value).to_integral_value():
                problems.append(f"{name}: {value!r} must be a whole number (an extended resource)")
        if problems:
            raise ValueError("; ".join(problems))
        return resources

    @model_validator(mode="after")
    def _requests_within_limits(self) -> Self:
        requests, limits = self.requests or {}, self.limits or {}
        problems = []
        for name in requests.keys() & limits.keys():
            request, limit = quantity(requests[name]), quantity(limits[name])
            if request > limit:
                problems.append(f"requests.{name} ({requests[name]}) is above limits.{name} ({limits[name]})")
            elif _extended(name) and request != limit:
                problems.append(f"requests.{name} must equal limits.{name} (extended resources are not overcommitted)")
        if problems:
            raise ValueError("; ".join(sorted(problems)))
        return self

    def as_kubernetes(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class PersistentVolumeClaimSource(ApiModel):
    claim_name: str = Field(min_length=1, description="PersistentVolumeClaim holding the model repository.")
    sub_path: PlainText | None = Field(default=None, description="Folder inside the volume that is the repository.")
    read_only: bool = Field(default=True, description="Mount read-only (default true).")


class ModelRepository(ApiModel):
    """Where Triton finds model directories; models with `files` are sent with the load request instead."""

    model_config = with_cel_rules(
        ("!(has(self.pvc) && has(self.uri))", "set either pvc or uri, not both (neither means an emptyDir)"),
        ("!has(self.credentialsSecretRef) || has(self.uri)", "credentialsSecretRef is only used with uri"),
    )

    pvc: PersistentVolumeClaimSource | None = Field(default=None, description="A PVC mounted at /models.")
    uri: (
        Annotated[str, StringConstraints(pattern=S3_GS_AZURE_URI), BeforeValidator(without_control_characters)] | None
    ) = Field(
        default=None,
        description="A Triton-native cloud repository: s3://, gs:// or as:// (Azure).",
    )
    credentials_secret_ref: LocalObjectReference | None = Field(
        default=None,
        description=(
            "Secret with the cloud credentials for `uri`: its keys become environment variables "
            "(AWS_ACCESS_KEY_ID, AZURE_STORAGE_ACCOUNT, ...); for gs:// a key `credentials.json` "
            "is mounted and GOOGLE_APPLICATION_CREDENTIALS points to it."
        ),
    )

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if self.pvc is not None and self.uri is not None:
            raise ValueError("set either pvc or uri, not both (neither means an emptyDir)")
        if self.credentials_secret_ref is not None and self.uri is None:
            raise ValueError("credentialsSecretRef is only used with uri")
        return self


# The node label NVIDIA's GPU feature discovery (part of the GPU operator) puts on each GPU node: its GPU's model.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# A label value, as Kubernetes takes one in a nodeSelector.
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
# One GPU's memory by product, in MiB: memory.total as nvidia-smi reports it, not the size on the box. The H100's
# was read on this project's own GPU host (81559 MiB: 85.5 GB, a little under 80 GiB); the others are nvidia-smi's
# figures for those boards as published, not measured here (a T4, sold as 16 GB, shows 15360 MiB).
GPU_PRODUCT_MEMORY_MIB = {
    "NVIDIA-H100-80GB-HBM3": 81559,
    "NVIDIA-H200": 143771,
    "NVIDIA-A100-SXM4-80GB": 81920,
    "NVIDIA-A100-SXM4-40GB": 40960,
    "NVIDIA-L40S": 46068,
    "NVIDIA-L4": 23034,
    "NVIDIA-A10G": 23028,
    "Tesla-T4": 15360,
}
GPU_PRODUCT_NEEDS_GPUS = "gpus.product needs gpus.count above 0: a pod without GPUs runs on no GPU product"


class Gpus(ApiModel):
    model_config = with_cel_rules(("!has(self.product) || (has(self.count) && self.count > 0)", GPU_PRODUCT_NEEDS_GPUS))

    count: int = Field(default=0, ge=0, description="GPUs per pod (default 0: CPU only).")
    resource_name: str = Field(
        default="nvidia.com/gpu",
        min_length=1,
        description="Extended resource name of the GPU (default nvidia.com/gpu).",
    )
    product: Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE_PATTERN)] | None = Field(
        default=None,
        description=f"The GPU model the pods run on, as NVIDIA's GPU feature discovery labels nodes ({GPU_PRODUCT_LABEL}, "
        "e.g. NVIDIA-H100-80GB-HBM3, NVIDIA-A100-SXM4-40GB, NVIDIA-L4, Tesla-T4): the pods get it as a nodeSelector, and "
        "capacity.gpuMemory defaults to count x its memory where the product is known.",
    )

    @model_validator(mode="after")
    def _product_needs_gpus(self) -> Self:
        if self.product is not None and self.count == 0:
            raise ValueError(f"{GPU_PRODUCT_NEEDS_GPUS}; set gpus.count, or remove gpus.product")
        return self

    @property
    def product_memory_bytes(self) -> int | None:
        """The memory of the pod's GPUs together, where gpus.product is a known one; else None."""
        mib = GPU_PRODUCT_MEMORY_MIB.get(self.product or "")
        return None if mib is None else self.count * mib * MiB


class Capacity(ApiModel):
    """What one pod offers the models placed on it by a serverSelector (every pod holds every model)."""

    memory: ByteQuantity | None = Field(
        default=None,
        description="Host memory for the models of one pod. Default: resources.limits.memory less Triton's own baseline "
        "(/dev/shm is added to the limit on top, so it is not taken from it); without a limit, unknown: the server takes "
        "models only when no server with a known capacity has room.",
    )
    gpu_memory: ByteQuantity | None = Field(
        default=None,
        description="GPU memory for the models of one pod, over all its GPUs. Default: gpus.count x the memory of "
        "gpus.product where that is a known product; else not counted.",
    )


class MemoryPools(ApiModel):
    pinned_bytes: ByteQuantity | None = Field(
        default=None, description="--pinned-memory-pool-byte-size (Triton's default is 256Mi)."
    )
    cuda_bytes_per_gpu: ByteQuantity | None = Field(
        default=None, description="--cuda-memory-pool-byte-size for every GPU of the pod (Triton's default is 64Mi)."
    )


class Keepalive(ApiModel):
    """Triton's six gRPC keepalive flags; unset ones keep Triton's defaults."""

    time_ms: int | None = Field(default=None, ge=1, description="--grpc-keepalive-time (ms between pings).")
    timeout_ms: int | None = Field(
        default=None, ge=1, description="--grpc-keepalive-timeout (ms to wait for a ping ack)."
    )
    permit_without_calls: bool | None = Field(default=None, description="--grpc-keepalive-permit-without-calls.")
    http2_max_pings_without_data: int | None = Field(
        default=None, ge=0, description="--grpc-http2-max-pings-without-data."
    )
    http2_min_recv_ping_interval_without_data_ms: int | None = Field(
        default=None, ge=0, description="--grpc-http2-min-recv-ping-interval-without-data (ms)."
    )
    http2_max_ping_strikes: int | None = Field(default=None, ge=0, description="--grpc-http2-max-ping-strikes.")


class Grpc(ApiModel):
    keepalive: Keepalive | None = None
    max_connection_age_ms: int = Field(
        default=10_000,
        ge=0,
        description="--grpc-max-connection-age (ms): a client's channel is closed (GOAWAY) this long after it opened "
        "and the client reconnects through the Service, so kept channels reach the pods a scale-up adds and leave a "
        "pod being drained; Triton sends no GOAWAY of its own when it stops. Calls in flight go on for the grace. "
        "0 turns it off (kept channels then never leave their pod).",
    )
    max_connection_age_grace_ms: int | None = Field(
        default=None,
        ge=0,
        description="--grpc-max-connection-age-grace (ms): after the GOAWAY, calls in flight go on this long, then the "
        "connection is closed and what is still running is cut (UNAVAILABLE). Unset: drain.maxRequestSeconds. Set "
        "below drain.maxRequestSeconds, the server is refused: lower maxRequestSeconds to say requests are shorter.",
    )


class Drain(ApiModel):
    """How a pod leaves without failing requests: Kubernetes takes a terminating pod out of the Service
    while its preStop runs, asynchronously, so Triton is stopped only once no client can still reach it
    and every request it took has ended."""

    max_request_seconds: int = Field(
        default=DEFAULT_MAX_REQUEST_SECONDS,
        ge=1,
        description=f"The longest request or stream (a decoupled model's token stream) a pod must carry to its end "
        f"(default {DEFAULT_MAX_REQUEST_SECONDS}). The gRPC connection-age grace and the preStop delay follow from it: "
        f"a pod that leaves (scale-down, rollout) waits endpointsPropagationSeconds + 1.1 x maxConnectionAgeMs + this "
        f"before Triton stops (136 s by default), holding its GPUs and memory meanwhile, so lower it for servers "
        f"whose requests are short.",
    )
    endpoints_propagation_seconds: int = Field(
        default=5,
        ge=0,
        description="How long the cluster takes to stop sending new connections to a terminating pod "
        "(EndpointSlices reaching every kube-proxy and load balancer).",
    )
    pre_stop_seconds: int | None = Field(
        default=None,
        ge=0,
        description="The preStop delay before Triton gets SIGTERM. Unset: endpointsPropagationSeconds plus one gRPC "
        "max connection age (with gRPC's 10% jitter) and its grace, so every kept channel has moved to another pod and "
        "every call it carried has ended; with the age off, endpointsPropagationSeconds plus maxRequestSeconds. "
        "0: no delay (requests fail at every scale-down and rollout).",
    )


class PythonBackend(ApiModel):
    """Shared memory of the python backend: one region per model instance, grown on demand, never shrunk."""

    shm_default_bytes: ByteQuantity = Field(
        default=MiB, ge=MiB, description="shm-default-byte-size: first size of each instance's region (min 1Mi)."
    )
    shm_growth_bytes: ByteQuantity = Field(
        default=MiB, ge=1, description="shm-growth-byte-size: the step a region grows by (default 1Mi)."
    )


def _auto_or_bytes(value: Any) -> Any:
    return value if value == "auto" else bytes_from_quantity(value)


SizeLimit = Annotated[
    Literal["auto"] | int,
    BeforeValidator(_auto_or_bytes),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": f"^auto$|{BYTE_QUANTITY_PATTERN}"}),
]


class SharedMemory(ApiModel):
    size_limit: SizeLimit = Field(
        default="auto",
        description="Size of the /dev/shm emptyDir: 'auto' (default) computes it from the models that run in it.",
    )
    headroom: ByteQuantity = Field(default=64 * MiB, description="Added on top of the computed size (default 64Mi).")


class Logging(ApiModel):
    verbose: int = Field(default=0, ge=0, description="--log-verbose level (0 is off).")
    format: Literal["default", "ISO8601"] = Field(default="default", description="--log-format.")
    info: bool = True
    warning: bool = True
    error: bool = True


class MemoryReader(ApiModel):
    """A sidecar that reads what each python model's stubs hold, in host memory and, where it can see the
    GPUs, GPU memory (`triton-operator memory-sidecar`)."""

    enabled: bool = Field(
        default=False,
        description="Add the sidecar (and shareProcessNamespace) to the pods, so models' status.memory is Measured; "
        "off, it stays Declared or Default.",
    )
    image: str = Field(
        default=OPERATOR_IMAGE,
        min_length=1,
        description=f"The operator's image, which holds the sidecar (default {OPERATOR_IMAGE}).",
    )


class PodOverrides(ApiModel):
    """Pod template details passed through to the Deployment."""

    labels: dict[str, str] = Field(default={})
    annotations: dict[str, str] = Field(default={})
    node_selector: dict[str, str] = Field(default={})
    tolerations: KubernetesObjectList | None = kubernetes_object_field("Pod tolerations.")
    affinity: KubernetesObject | None = kubernetes_object_field("Pod affinity.")
    security_context: KubernetesObject | None = kubernetes_object_field(
        "Pod securityContext, merged over the defaults (runAsNonRoot, user, group and fsGroup 1000, seccomp "
        "RuntimeDefault): a field set here wins, the others stay."
    )
    container_security_context: KubernetesObject | None = kubernetes_object_field(
        "The tritonserver container's securityContext, merged over its defaults (allowPrivilegeEscalation false, "
        "readOnlyRootFilesystem, capabilities drop ALL): a field set here wins, the others stay."
    )
    automount_service_account_token: bool = Field(
        default=False,
        description="Mount the service account's API token into the pods (default false: Triton never uses it; "
        "set true only for a sidecar that calls the Kubernetes API).",
    )
    image_pull_secrets: list[LocalObjectReference] = Field(default=[])
    service_account_name: str | None = None
    priority_class_name: str | None = None
    runtime_class_name: str | None = Field(
        default=None, description="e.g. 'nvidia' where the GPU runtime is not the default."
    )
    sidecars: KubernetesObjectList | None = kubernetes_object_field(
        "Extra containers; each gets /dev/shm mounted, so it can use system shared memory with Triton."
    )


class Service(ApiModel):
    model_config = with_cel_rules(
        (
            "!has(self.type) || self.type == 'ClusterIP' || (has(self.exposeOutsideCluster) && self.exposeOutsideCluster)",
            "service.type NodePort or LoadBalancer puts Triton's ports outside the cluster: set service.exposeOutsideCluster: true to mean it",
        ),
    )

    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    annotations: dict[str, str] = Field(default={})
    expose_outside_cluster: bool = Field(
        default=False,
        description="Must be true for type NodePort or LoadBalancer, which reach Triton's ports from outside the cluster "
        "(inference open to all; the administrative APIs answer only to keys).",
    )

    @model_validator(mode="after")
    def _exposed_only_when_meant(self) -> Self:
        if self.type != "ClusterIP" and not self.expose_outside_cluster:
            raise ValueError(
                f"service.type {self.type} puts Triton's ports outside the cluster: set service.exposeOutsideCluster: true "
                "to mean it, or use ClusterIP"
            )
        return self


class NetworkPeer(ApiModel):
    """Pods let in: those with `podLabels` in the namespaces with `namespaceLabels`."""

    namespace_labels: dict[str, str] | None = Field(
        default=None,
        description="Labels of the namespaces let in; unset: the server's own namespace; {}: every namespace.",
    )
    pod_labels: dict[str, str] = Field(
        default={}, description="Labels of the pods let in; {}: every pod of those namespaces."
    )


# A namespace's name, as a label Kubernetes sets on every namespace.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# Where Prometheus runs in most clusters.
MONITORING_NAMESPACE_LABELS = {NAMESPACE_NAME_LABEL: "monitoring"}


class NetworkPolicySettings(ApiModel):
    """Who reaches the pods. The operator's own pods always reach gRPC (its control path)."""

    enabled: bool = Field(
        default=True,
        description="Render a NetworkPolicy for the pods; false leaves them open to every pod the cluster's network lets in.",
    )
    inference_from: list[NetworkPeer] = Field(
        default_factory=lambda: [NetworkPeer()],
        description="Who reaches inference (HTTP 8000, gRPC 8001); default: every pod of the server's namespace.",
    )
    metrics_from: list[NetworkPeer] = Field(
        default_factory=lambda: [NetworkPeer(namespace_labels=MONITORING_NAMESPACE_LABELS)],
        description="Who reaches metrics (8002); default: every pod of the namespace named monitoring.",
    )


# -- Autoscaling --------------------------------------------------------------------------------
# The autoscaler scales the TritonServer through its scale subresource (spec.replicas); the operator
# carries spec.replicas to the Deployment. Rendered by render/autoscaling.py.

DEFAULT_QUEUE_MICROSECONDS_PER_REQUEST = 50  # what Triton's own k8s-onprem chart scales on
STABILIZATION_LIMIT_SECONDS = 3600  # the HorizontalPodAutoscaler's bound on a stabilization window


class AutoscalingTarget(ApiModel):
    """What the autoscaler holds each pod at: one of Triton's own metrics, averaged over the server's pods."""

    model_config = with_cel_rules(
        (
            "has(self.queueMicrosecondsPerRequest) != has(self.pendingRequestsPerPod)",
            "set exactly one of queueMicrosecondsPerRequest or pendingRequestsPerPod",
        ),
    )

    queue_microseconds_per_request: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Time a request waits in Triton's queue, in microseconds (nv_inference_queue_duration_us over "
            "nv_inference_request_success, averaged over the models). A dynamic batcher's delay counts as queue "
            f"time: set it above maxQueueDelayMicroseconds. The default target: {DEFAULT_QUEUE_MICROSECONDS_PER_REQUEST}."
        ),
    )
    pending_requests_per_pod: int | None = Field(
        default=None,
        ge=1,
        description="Requests waiting for an execution in one pod (nv_inference_pending_request_count, summed over its models).",
    )

    @model_validator(mode="after")
    def _one_metric(self) -> Self:
        if (self.queue_microseconds_per_request is None) == (self.pending_requests_per_pod is None):
            raise ValueError("set exactly one of queueMicrosecondsPerRequest or pendingRequestsPerPod")
        return self


class Keda(ApiModel):
    server_address: Annotated[str, StringConstraints(pattern=r"^https?://.+")] = Field(
        description="Address of the Prometheus that KEDA's prometheus trigger queries, e.g. http://prometheus-operated.monitoring.svc:9090."
    )


class Autoscaling(ApiModel):
    """An autoscaler for the server: a HorizontalPodAutoscaler (metrics from prometheus-adapter) or a KEDA ScaledObject."""

    model_config = with_cel_rules(
        (
            "!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",
            "minReplicas is above maxReplicas: lower spec.autoscaling.minReplicas or raise spec.autoscaling.maxReplicas",
        ),
        (
            "!has(self.engine) || self.engine != 'keda' || has(self.keda)",
            "engine: keda needs keda.serverAddress, the Prometheus that KEDA queries",
        ),
        ("!has(self.keda) || (has(self.engine) && self.engine == 'keda')", "keda is only used with engine: keda"),
    )

    engine: Literal["hpa", "keda"] = Field(
        default="hpa",
        description=(
            "hpa (default): an autoscaling/v2 HorizontalPodAutoscaler on a Pods metric that prometheus-adapter serves "
            "(the chart ships its rules); keda: a KEDA ScaledObject with a Prometheus trigger."
        ),
    )
    min_replicas: int = Field(
        default=1, ge=1, description="Fewest pods (default 1; an idle Triton reports no load to scale up from zero on)."
    )
    max_replicas: int = Field(ge=1, description="Most pods.")
    target: AutoscalingTarget = Field(
        default_factory=lambda: AutoscalingTarget(
            queue_microseconds_per_request=DEFAULT_QUEUE_MICROSECONDS_PER_REQUEST
        ),
        description=f"The metric and its target per pod (default: queueMicrosecondsPerRequest {DEFAULT_QUEUE_MICROSECONDS_PER_REQUEST}).",
    )
    scale_up_stabilization_seconds: int = Field(
        default=0,
        ge=0,
        le=STABILIZATION_LIMIT_SECONDS,
        description="Scale up on the highest recommendation of this window (default 0: at once).",
    )
    scale_down_stabilization_seconds: int = Field(
        default=300,
        ge=0,
        le=STABILIZATION_LIMIT_SECONDS,
        description="Scale down only to the highest recommendation of this window (default 300), so a lull does not drop pods a burst needs back.",
    )
    keda: Keda | None = Field(default=None, validate_default=True, description="KEDA's settings, with engine: keda.")

    @field_validator("max_replicas")
    @classmethod
    def _not_below_min(cls, max_replicas: int, info: ValidationInfo) -> int:
        """Field validators, so these come in the same run as a mistake in the target."""
        min_replicas = info.data.get("min_replicas")
        if min_replicas is not None and min_replicas > max_replicas:
            raise ValueError(
                f"{max_replicas} is below minReplicas ({min_replicas}): lower spec.autoscaling.minReplicas or raise spec.autoscaling.maxReplicas"
            )
        return max_replicas

    @field_validator("keda")
    @classmethod
    def _only_with_keda(cls, keda: Keda | None, info: ValidationInfo) -> Keda | None:
        engine = info.data.get("engine")
        if engine == "keda" and keda is None:
            raise ValueError("engine: keda needs keda.serverAddress, the Prometheus that KEDA queries")
        if engine == "hpa" and keda is not None:
            raise ValueError("keda is only used with engine: keda")
        return keda


class TritonServerSpec(ApiModel):
    model_config = with_cel_rules(
        (
            f"!has(self.extraArgs) || self.extraArgs.all(a, !a.matches('{OWNED_FLAG_PATTERN}') "
            f"&& !a.matches('{OWNED_BACKEND_CONFIG_ARG}'))",
            "extraArgs holds flags the operator sets, or a prefix of one, which Triton reads as the whole flag (model "
            "control, repository, ports, restricted APIs, memory pools, logging, python shm sizes): use the typed fields",
        ),
        (
            "!has(self.grpc) || !has(self.grpc.maxConnectionAgeGraceMs) "
            "|| (has(self.grpc.maxConnectionAgeMs) && self.grpc.maxConnectionAgeMs == 0) "
            "|| self.grpc.maxConnectionAgeGraceMs >= 1000 * "
            f"(has(self.drain) && has(self.drain.maxRequestSeconds) ? self.drain.maxRequestSeconds : {DEFAULT_MAX_REQUEST_SECONDS})",
            "grpc.maxConnectionAgeGraceMs is below drain.maxRequestSeconds: a request in flight when its connection is "
            "recycled would be cut; raise the grace, leave it unset, or lower drain.maxRequestSeconds",
        ),
    )

    image: str = Field(default=DEFAULT_IMAGE, min_length=1, description=f"Triton image (default {DEFAULT_IMAGE}).")
    replicas: int = Field(
        default=1,
        ge=0,
        description="Pods in the fleet; every one serves every model. With autoscaling, the autoscaler sets it (leave it out of Git).",
    )
    backends: list[Annotated[str, StringConstraints(min_length=1)]] = Field(
        default=list(FULL_IMAGE_BACKENDS),
        description="Backends the image contains; a model needing another one is refused. Default: the full image.",
    )
    model_repository: ModelRepository = Field(default_factory=ModelRepository)
    resources: ResourceRequirements | None = Field(
        default=None, description="Container requests/limits; /dev/shm is added to the memory request and limit."
    )
    gpus: Gpus = Field(default_factory=Gpus)
    capacity: Capacity = Field(
        default_factory=Capacity, description="Memory one pod offers models placed by a serverSelector."
    )
    memory_pools: MemoryPools = Field(default_factory=MemoryPools)
    grpc: Grpc = Field(default_factory=Grpc)
    python_backend: PythonBackend = Field(default_factory=PythonBackend)
    shared_memory: SharedMemory = Field(default_factory=SharedMemory)
    logging: Logging = Field(default_factory=Logging)
    model_load_thread_count: int | None = Field(default=None, ge=1, description="--model-load-thread-count.")
    exit_timeout_seconds: int = Field(
        default=30,
        ge=0,
        description="--exit-timeout-secs; the pod's grace period is set above it and the preStop delay.",
    )
    drain: Drain = Field(default_factory=Drain, validate_default=True)  # checked against grpc even when left out
    extra_args: list[PlainText] = Field(
        default=[],
        description="Extra tritonserver flags (escape hatch). Flags the operator sets are refused, by any prefix Triton "
        "reads as them (e.g. --model-control), as are control characters.",
    )
    pod: PodOverrides = Field(default_factory=PodOverrides)
    memory_reader: MemoryReader = Field(default_factory=MemoryReader)
    service: Service = Field(default_factory=Service)
    network_policy: NetworkPolicySettings = Field(default_factory=NetworkPolicySettings)
    autoscaling: Autoscaling | None = Field(
        default=None, description="Scale the pods with traffic, on Triton's own metrics (the autoscaler sets replicas)."
    )
    rollout: RolloutSpec = Field(
        default_factory=RolloutSpec,
        description="How a model's new revision reaches the pods, for every model without a spec.rollout of its own.",
    )

    def kubernetes_objects(self) -> dict[str, Any]:
        """The Kubernetes objects given here, by field: passed to the pod as written (opaque in the CRD),
        they are all of a server's rendering that the Kubernetes schema can refuse; the rest is typed."""
        given = {
            "resources.claims": self.resources.claims if self.resources else None,
            "pod.tolerations": self.pod.tolerations,
            "pod.affinity": self.pod.affinity,
            "pod.securityContext": self.pod.security_context,
            "pod.containerSecurityContext": self.pod.container_security_context,
            "pod.sidecars": self.pod.sidecars,
        }
        return {field: value for field, value in given.items() if value}

    @field_validator("drain")
    @classmethod
    def _grace_covers_the_longest_request(cls, drain: Drain, info: ValidationInfo) -> Drain:
        """A grace shorter than the longest request cuts that request whenever its connection is recycled,
        on every pod at every age, not only while one drains: refused rather than warned, as nothing else
        would show it before streams break."""
        grpc = info.data.get("grpc")
        if grpc is None or not grpc.max_connection_age_ms or grpc.max_connection_age_grace_ms is None:
            return drain
        if grpc.max_connection_age_grace_ms < drain.max_request_seconds * 1000:
            raise ValueError(
                f"grpc.maxConnectionAgeGraceMs ({grpc.max_connection_age_grace_ms}) is below drain.maxRequestSeconds "
                f"({drain.max_request_seconds} s): a request or stream in flight when its connection is recycled (every "
                f"{grpc.max_connection_age_ms} ms) would be cut at the grace. Raise grpc.maxConnectionAgeGraceMs to at "
                f"least {drain.max_request_seconds * 1000}, leave it unset (it follows drain.maxRequestSeconds), or lower "
                f"drain.maxRequestSeconds to the longest request this server carries"
            )
        return drain

    @field_validator("extra_args")
    @classmethod
    def _no_owned_flags(cls, args: list[str]) -> list[str]:
        """Every flag the operator sets or sizes, by any spelling Triton takes, all named at once."""
        problems = [problem for arg in args if (problem := owned_arg_problem(arg))]
        if problems:
            raise ValueError(f"the operator sets these flags, remove them from extraArgs: {'; '.join(problems)}")
        return args
