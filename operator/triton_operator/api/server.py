"""`TritonServer.spec`: a fleet of Triton pods with typed server settings.

The spec's parts live beside it: pod_resources.py (resources, GPUs, memory), traffic.py (gRPC, drain,
Service, NetworkPolicy), autoscaling_spec.py and extra_args.py; here are the spec itself, where models
come from, logging and the pod's overrides, and the checks that tie the parts together.
"""

from typing import Annotated, Any, Literal, Self

from pydantic import (
    BeforeValidator,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .autoscaling_spec import Autoscaling
from .extra_args import (
    CACHE_CONFIG_FLAG,
    NAMED_CACHE_CONFIG_ARG,
    OWNED_BACKEND_CONFIG_ARG,
    OWNED_FLAG_PATTERN,
    cache_name_problems,
    owned_arg_problem,
)
from .object_names import DNS_SUBDOMAIN_PATTERN, MAX_NAME_LENGTH, object_name_problem
from .pod_resources import Capacity, Gpus, MemoryPools, PythonBackend, ResourceRequirements, SharedMemory
from .rollout_spec import RolloutSpec
from .traffic import DEFAULT_MAX_REQUEST_SECONDS, Drain, Grpc, NetworkPolicySettings, Service
from .types import (
    ApiModel,
    BackendName,
    ImageReference,
    KubernetesObject,
    KubernetesObjectList,
    LocalObjectReference,
    PlainText,
    RelativePath,
    cel_string,
    kubernetes_object_field,
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

S3_GS_AZURE_URI = r"^(s3|gs|as)://[^\x00-\x1f\x7f]+$"


def _claim_name(value: Any) -> Any:
    if isinstance(value, str) and (problem := object_name_problem(value, "PersistentVolumeClaim")):
        raise ValueError(problem)
    return value


class PersistentVolumeClaimSource(ApiModel):
    claim_name: Annotated[
        str,
        StringConstraints(min_length=1, max_length=MAX_NAME_LENGTH, pattern=DNS_SUBDOMAIN_PATTERN),
        BeforeValidator(_claim_name),
    ] = Field(description="PersistentVolumeClaim holding the model repository.")
    sub_path: RelativePath | None = Field(default=None, description="Folder inside the volume that is the repository.")
    read_only: bool = Field(default=True, description="Mount read-only (default true).")


class InlineModelRepository(ApiModel):
    """Where Triton finds model directories; models with `files` are sent with the load request instead."""

    uri: (
        Annotated[str, StringConstraints(pattern=S3_GS_AZURE_URI), BeforeValidator(without_control_characters)] | None
    ) = Field(
        default=None,
        description="A Triton-native cloud repository: s3://, gs:// or as:// (Azure).",
    )


class ModelRepository(InlineModelRepository):
    """Where Triton finds model directories; models with `files` are sent with the load request instead. A
    volume or a Secret is a TritonServer's to give (a model's own server takes a uri alone)."""

    model_config = with_cel_rules(
        ("!(has(self.pvc) && has(self.uri))", "set either pvc or uri, not both (neither means an emptyDir)"),
        ("!has(self.credentialsSecretRef) || has(self.uri)", "credentialsSecretRef is only used with uri"),
    )

    pvc: PersistentVolumeClaimSource | None = Field(default=None, description="A PVC mounted at /models.")
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


class Logging(ApiModel):
    verbose: int = Field(default=0, ge=0, description="--log-verbose level (0 is off).")
    format: Literal["default", "ISO8601"] = Field(default="default", description="--log-format.")
    info: bool = True
    warning: bool = True
    error: bool = True


class InlineMemoryReader(ApiModel):
    """A sidecar that reads what each python model's stubs hold, in host memory and, where it can see the
    GPUs, GPU memory (`triton-operator memory-sidecar`)."""

    enabled: bool = Field(
        default=False,
        description="Add the sidecar (and shareProcessNamespace) to the pods, so models' status.memory is Measured; "
        "off, it stays Declared or Default.",
    )


class MemoryReader(InlineMemoryReader):
    """The memory sidecar, and the image it runs (a TritonServer's to choose)."""

    image: ImageReference = Field(
        default=OPERATOR_IMAGE,
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


# The API server's copy of the check that the connection-age grace covers the longest request.
_GRACE_COVERS_REQUESTS = (
    "!has(self.grpc) || !has(self.grpc.maxConnectionAgeGraceMs) || (has(self.grpc.maxConnectionAgeMs) && "
    "self.grpc.maxConnectionAgeMs == 0) || self.grpc.maxConnectionAgeGraceMs >= 1000 * (has(self.drain) && "
    f"has(self.drain.maxRequestSeconds) ? self.drain.maxRequestSeconds : {DEFAULT_MAX_REQUEST_SECONDS})",
    "grpc.maxConnectionAgeGraceMs is below drain.maxRequestSeconds: a request in flight when its connection is "
    "recycled would be cut; raise the grace, leave it unset, or lower drain.maxRequestSeconds",
)


class InlineServerSpec(ApiModel):
    """What a TritonModel's own server takes: sizes, resources and model settings. Whatever else shapes the pod
    (its image, Triton's flags, containers, service account, security contexts, scheduling, labels, volumes,
    Secrets, Service and NetworkPolicy) is a TritonServer's alone: where TritonModels are granted more widely
    than Deployments, it would make a model's author the author of a Deployment."""

    model_config = with_cel_rules(_GRACE_COVERS_REQUESTS)

    replicas: int = Field(
        default=1,
        ge=0,
        description="Pods in the fleet; every one serves every model. With autoscaling, the autoscaler sets it (leave "
        "it out of Git).",
    )
    backends: list[BackendName] = Field(
        default=list(FULL_IMAGE_BACKENDS),
        description="Backends the image contains; a model needing another one is refused. Default: the full image.",
    )
    model_repository: InlineModelRepository = Field(default_factory=InlineModelRepository)
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
    memory_reader: InlineMemoryReader = Field(default_factory=InlineMemoryReader)
    autoscaling: Autoscaling | None = Field(
        default=None, description="Scale the pods with traffic, on Triton's own metrics (the autoscaler sets replicas)."
    )
    rollout: RolloutSpec = Field(
        default_factory=RolloutSpec,
        description="How a model's new revision reaches the pods, for every model without a spec.rollout of its own.",
    )

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
                f"({drain.max_request_seconds} s): a request or stream in flight when its connection is recycled "
                f"(every {grpc.max_connection_age_ms} ms) would be cut at the grace. Raise "
                f"grpc.maxConnectionAgeGraceMs to at least {drain.max_request_seconds * 1000}, leave it unset (it "
                "follows drain.maxRequestSeconds), or lower drain.maxRequestSeconds to the longest request this "
                "server carries"
            )
        return drain

    def server_spec(self) -> "TritonServerSpec":
        """The spec of the child TritonServer it stands for, with the same fields set."""
        return TritonServerSpec.model_validate(self.model_dump(by_alias=True, exclude_unset=True))


class TritonServerSpec(InlineServerSpec):
    """A fleet of Triton pods: what a model's own server takes, and what shapes the pod besides."""

    model_config = with_cel_rules(
        (
            f"!has(self.extraArgs) || self.extraArgs.all(a, !a.matches({cel_string(OWNED_FLAG_PATTERN)}) "
            f"&& !a.matches({cel_string(OWNED_BACKEND_CONFIG_ARG)}))",
            "extraArgs holds flags the operator sets, or a prefix of one, which Triton reads as the whole flag (model "
            "control, repository and models loaded, ports, addresses and protocols, restricted APIs, gRPC settings, "
            "memory pools, logging, python shm sizes): use the typed fields",
        ),
        (
            f"!has(self.extraArgs) || self.extraArgs.all(a, !a.startsWith('{CACHE_CONFIG_FLAG}=') || "
            f"a.matches({cel_string(NAMED_CACHE_CONFIG_ARG)}))",
            "extraArgs: --cache-config names a cache that is no cache's name (letters, digits, '_', '.' and '-')",
        ),
        _GRACE_COVERS_REQUESTS,
    )

    image: ImageReference = Field(default=DEFAULT_IMAGE, description=f"Triton image (default {DEFAULT_IMAGE}).")
    model_repository: ModelRepository = Field(default_factory=ModelRepository)
    # Bounded, as the CRD's CEL rules over them must be for the API server to estimate their cost.
    extra_args: list[Annotated[PlainText, Field(max_length=512)]] = Field(
        default=[],
        max_length=32,
        description="Extra tritonserver flags (escape hatch). Flags the operator sets are refused, by any prefix "
        "Triton reads as them (e.g. --model-control), as are control characters.",
    )
    pod: PodOverrides = Field(default_factory=PodOverrides)
    service: Service = Field(default_factory=Service)
    network_policy: NetworkPolicySettings = Field(default_factory=NetworkPolicySettings)
    memory_reader: MemoryReader = Field(default_factory=MemoryReader)

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

    @field_validator("extra_args")
    @classmethod
    def _no_owned_flags(cls, args: list[str]) -> list[str]:
        """Every flag the operator sets or sizes, by any spelling Triton takes, all named at once."""
        problems = [problem for arg in args if (problem := owned_arg_problem(arg))]
        if problems:
            raise ValueError(f"the operator sets these flags, remove them from extraArgs: {'; '.join(problems)}")
        if problems := cache_name_problems(args):
            raise ValueError(f"{CACHE_CONFIG_FLAG} names no cache: {'; '.join(problems)}")
        return args
