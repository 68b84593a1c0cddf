"""How big a Triton pod's /dev/shm must be, from what runs in it. The one place the formula lives.

Measured on Triton 2.51 (CPU, python backend; docs/triton-facts.md):

- Each python-backend model instance is a stub process with one /dev/shm region. It starts at
  `shm-default-byte-size` (default and minimum 1 MiB), grows in steps of `shm-growth-byte-size`
  and never shrinks. It grows to the default plus 1.2x the inputs and outputs of one execution
  (bench/python_backend_shm.py; bench/RESULTS.md, "Python-backend stub region growth").
- A config reload runs the old and the new instances side by side until the new ones are ready,
  so the model being reloaded needs its shm twice. The sync reloads one model per replica at a
  time, so the overlap is the largest model's share, counted once.
- Too small at load: "Unable to initialize shared memory key ... No space left on device" (the
  old version keeps serving); too small at inference: "Failed to increase the shared memory
  pool size", with nothing in the log.
- Clients in the pod (sidecars) add their registered system-shm regions (`sharedMemory.clientPool`).

A pod's /dev/shm without a volume is 64 MiB; the computed size never goes below that.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction

from ..api.resources import TritonModel
from ..api.server import TritonServerSpec
from ..api.types import MiB
from ..protocol.triton_proto import model_config_pb2

GROWTH_PER_EXECUTION_BYTE = Fraction(6, 5)  # 1.2, measured; a fraction keeps 50 MiB -> 60 MiB exact
FLOOR_BYTES = 64 * MiB
# Backends that run model code in python-backend stub processes.
PYTHON_STUB_BACKENDS = frozenset({"python", "vllm"})
GPU_KINDS = (model_config_pb2.ModelInstanceGroup.KIND_GPU, model_config_pb2.ModelInstanceGroup.KIND_AUTO)


@dataclass(frozen=True)
class ModelShm:
    """One model's share of /dev/shm."""

    model: str
    instances: int = 0
    region_bytes: int = 0
    client_pool_bytes: int = 0
    sized_from_config: bool = True

    @property
    def stub_bytes(self) -> int:
        return self.instances * self.region_bytes

    @property
    def total_bytes(self) -> int:
        return self.stub_bytes + self.client_pool_bytes


@dataclass(frozen=True)
class ShmPlan:
    """The /dev/shm size of a server's pods and how it was reached."""

    models: tuple[ModelShm, ...] = field(default_factory=tuple)
    reload_overlap_bytes: int = 0
    headroom_bytes: int = 0
    required_bytes: int = FLOOR_BYTES
    size_limit_bytes: int = FLOOR_BYTES

    @property
    def sufficient(self) -> bool:
        return self.size_limit_bytes >= self.required_bytes

    def share(self, model: str) -> ModelShm | None:
        """The share of the model Triton knows by this name; None when it has none here."""
        return self._by_model.get(model)

    @functools.cached_property
    def _by_model(self) -> dict[str, ModelShm]:
        return {share.model: share for share in self.models}


def uses_python_stubs(config: model_config_pb2.ModelConfig) -> bool:
    return config.backend in PYTHON_STUB_BACKENDS or config.runtime.endswith(".py")


def instance_count(config: model_config_pb2.ModelConfig, server_gpus: int) -> int:
    """Instances Triton starts: a GPU group starts `count` on each of its GPUs.

    With no instance group Triton makes one: one instance per GPU, or one on the CPU.
    """
    if not config.instance_group:
        return max(server_gpus, 1)
    total = 0
    for group in config.instance_group:
        count = group.count or 1
        gpus = len(group.gpus) or server_gpus
        total += count * gpus if group.kind in GPU_KINDS and gpus else count
    return total


# Bytes of one element of each fixed-size Triton data type (tritonclient's numpy types, without
# importing numpy: tests/render/test_render.py compares them); strings have no fixed size.
_ELEMENT_BYTES = {
    model_config_pb2.TYPE_BOOL: 1,
    model_config_pb2.TYPE_UINT8: 1,
    model_config_pb2.TYPE_UINT16: 2,
    model_config_pb2.TYPE_UINT32: 4,
    model_config_pb2.TYPE_UINT64: 8,
    model_config_pb2.TYPE_INT8: 1,
    model_config_pb2.TYPE_INT16: 2,
    model_config_pb2.TYPE_INT32: 4,
    model_config_pb2.TYPE_INT64: 8,
    model_config_pb2.TYPE_FP16: 2,
    model_config_pb2.TYPE_FP32: 4,
    model_config_pb2.TYPE_FP64: 8,
    model_config_pb2.TYPE_BF16: 2,
}


def execution_bytes(config: model_config_pb2.ModelConfig) -> int | None:
    """Bytes of all inputs and outputs of one execution at full batch; None if a size is variable."""
    batch = max(config.max_batch_size, 1)
    total = 0
    for tensor in [*config.input, *config.output]:
        element = _ELEMENT_BYTES.get(tensor.data_type)
        if element is None or any(dim < 0 for dim in tensor.dims):
            return None
        total += math.prod(tensor.dims) * element * batch
    return total


def region_bytes(execution: int, server: TritonServerSpec) -> int:
    """A stub's region after serving `execution` bytes of tensors: the default plus whole growth steps."""
    growth = server.python_backend.shm_growth_bytes
    return server.python_backend.shm_default_bytes + math.ceil(execution * GROWTH_PER_EXECUTION_BYTE / growth) * growth


def model_shm(model: TritonModel, config: model_config_pb2.ModelConfig, server: TritonServerSpec) -> ModelShm:
    pool = model.spec.shared_memory.client_pool
    pool_bytes = pool.regions * pool.region_bytes if pool else 0
    if not uses_python_stubs(config):
        return ModelShm(model.model_name, client_pool_bytes=pool_bytes)
    declared = model.spec.shared_memory.execution_bytes
    computed = execution_bytes(config)
    execution = declared if declared is not None else (computed or 0)
    return ModelShm(
        model.model_name,
        instances=instance_count(config, server.gpus.count),
        region_bytes=region_bytes(execution, server),
        client_pool_bytes=pool_bytes,
        sized_from_config=declared is not None or computed is not None,
    )


def shm_plan(server: TritonServerSpec, models: Iterable[ModelShm]) -> ShmPlan:
    """Size /dev/shm for a server from its models' shares."""
    shares = tuple(sorted(models, key=lambda s: s.model))
    overlap = max((share.stub_bytes for share in shares), default=0)
    headroom = server.shared_memory.headroom
    needed = sum(share.total_bytes for share in shares) + overlap + headroom
    required = max(FLOOR_BYTES, math.ceil(needed / MiB) * MiB)
    limit = server.shared_memory.size_limit
    return ShmPlan(
        models=shares,
        reload_overlap_bytes=overlap,
        headroom_bytes=headroom,
        required_bytes=required,
        size_limit_bytes=required if limit == "auto" else limit,
    )
