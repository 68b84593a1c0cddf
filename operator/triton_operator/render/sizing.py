"""A server's container memory when its spec sets none: what its models cost plus Triton's own baseline
(render/placement.py says how both were measured); the pod's /dev/shm goes on top when rendered.

Pure: the figures come from the models' specs (declared `memory.cpu`, else the default per-model figure).
The request is always derived; the limit only where no figure is a guess and the server has no GPU. A
server with `capacity.memory` is a pool that placement fills up to it: its pods are sized for the
capacity, whatever they hold now, so a model placed there or moved away does not roll them.
A default figure (20 MiB, an empty python model) under a limit would OOM-kill the first model that
loads a framework without declaring it, and a pod with GPUs holds CUDA's host memory besides, which the
baseline does not count: those pods get a request and no limit, as a pod whose user sets none.

The derived limit is never a capacity: `server_capacity` reads the spec alone, so a server sized from its
models has an unknown capacity, as before (its room would otherwise be exactly what it holds).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..api.resources import TritonModel
from ..api.server import TritonServerSpec
from .placement import TRITON_BASELINE_BYTES, MemorySource, model_figure


@dataclass(frozen=True)
class PodMemory:
    """The container memory derived from the models a server holds, /dev/shm not counted."""

    models_bytes: int  # the sum of its models' figures
    limited: bool  # a limit as well as a request

    @property
    def bytes(self) -> int:
        return self.models_bytes + TRITON_BASELINE_BYTES


def user_sets_memory(server: TritonServerSpec) -> bool:
    """The user's requests.memory or limits.memory: then theirs are the pod's, and nothing is derived."""
    resources = server.resources
    return resources is not None and any("memory" in (given or {}) for given in (resources.requests, resources.limits))


def pod_memory(server: TritonServerSpec, models: Iterable[TritonModel]) -> PodMemory | None:
    """The memory to request (and limit, where `limited`) for a server holding these models; None where
    the user sets the pod's memory."""
    if user_sets_memory(server):
        return None
    if (
        server.capacity.memory is not None
    ):  # a pool: sized for what placement may give it, not rolled as models come and go
        return PodMemory(server.capacity.memory, limited=server.gpus.count == 0)
    figures = [model_figure(model) for model in models]
    guessed = any(source is MemorySource.DEFAULT for _, _, source in figures)
    return PodMemory(sum(memory for memory, _, _ in figures), limited=not guessed and server.gpus.count == 0)
