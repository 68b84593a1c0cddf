"""What one pod of a TritonServer is given: container resources, GPUs, the memory it offers models,
Triton's memory pools and the shared memory of /dev/shm.

Apart from the server's spec as the sizing and placement decisions read these fields, and their
quantities are checked here (whole bytes, whole extended resources) before any pod is refused for them.
"""

from typing import Annotated, Any, Literal, Self

from pydantic import BeforeValidator, Field, StringConstraints, WithJsonSchema, field_validator, model_validator

from .types import (
    BYTE_QUANTITY_PATTERN,
    QUANTITY_MAX_LENGTH,
    QUANTITY_PATTERN,
    ApiModel,
    ByteQuantity,
    KubernetesObjectList,
    MiB,
    bytes_from_quantity,
    cel_string,
    kubernetes_object_field,
    quantity,
    with_cel_rules,
)


def _is_quantity(value: Any) -> Any:
    quantity(value)
    return value


# maxLength bounds what the API server estimates the resource rules' CEL to cost (unbounded, it refused the CRD).
QUANTITY_SCHEMA = {"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN, "maxLength": QUANTITY_MAX_LENGTH}
# A quantity kept as written (Kubernetes takes it as is), refused when it is not one.
Quantity = Annotated[
    int | str,
    BeforeValidator(_is_quantity),
    WithJsonSchema(QUANTITY_SCHEMA),
]
ResourceList = Annotated[
    dict[Annotated[str, StringConstraints(min_length=1)], Quantity],
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": 32,
            "additionalProperties": QUANTITY_SCHEMA,
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
            f"{present} || !('memory' in self.{field}) || "
            f"string(self.{field}['memory']).matches({cel_string(BYTE_QUANTITY_PATTERN)})",
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
        description="The GPU model the pods run on, as NVIDIA's GPU feature discovery labels nodes "
        f"({GPU_PRODUCT_LABEL}, e.g. NVIDIA-H100-80GB-HBM3, NVIDIA-A100-SXM4-40GB, NVIDIA-L4, Tesla-T4): the pods get "
        "it as a nodeSelector, and capacity.gpuMemory defaults to count x its memory where the product is known.",
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
        description="Host memory for the models of one pod. Default: resources.limits.memory less Triton's own "
        "baseline (/dev/shm is added to the limit on top, so it is not taken from it); without a limit, unknown: the "
        "server takes models only when no server with a known capacity has room.",
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
