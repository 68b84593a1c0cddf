"""Which TritonServer each model with a serverSelector runs on: the one with the least room left that still
holds it, largest models first; a placed model stays while it fits; no server is given more than it has.

Pure: servers and models come in as figures (what one pod offers, what one model costs), the placement
goes out with a message for each model no server can take, naming each candidate's free memory as a
Pod's FailedScheduling event does. Every pod of a server holds every model of it, so a server's room is
one pod's, whatever its replicas; a server scaled to zero has no pod to hold anything.

The figures come from what a pod's memory holds, measured on the nvidia-pytriton wheel's tritonserver
(CPU build, python backend; docs/triton-facts.md, "What a pod's memory holds"): tritonserver itself and
the python backend's library, a little more for each further model, and for a python model one stub
process per instance, whose resident memory is mostly the interpreter and numpy, shared by every stub of
the pod, and the rest its own.

So Triton's own baseline is taken as 64 MiB (server, python backend, and the stubs' shared libraries
once); a model that declares nothing and is not measured yet counts as the least a python model was seen
to cost, 20 MiB. A GPU build loads CUDA's libraries besides: set `capacity.memory` for those.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..api.parse import DEFAULT_NAMESPACE
from ..api.resources import TritonModel, TritonServer
from ..api.server import TritonServerSpec
from ..api.types import LabelSelector, MiB, bytes_from_quantity

TRITON_BASELINE_BYTES = 64 * MiB
DEFAULT_MODEL_BYTES = 20 * MiB
# An unschedulable model's message names this many candidates, those with the most room first.
NAMED_CANDIDATES = 10


class MemorySource(enum.StrEnum):
    """Where a model's figure comes from, the best first."""

    MEASURED = "Measured"
    DECLARED = "Declared"
    DEFAULT = "Default"


def server_capacity(spec: TritonServerSpec) -> tuple[int | None, int | None]:
    """One pod's room for models (host, GPU): spec.capacity, else host memory from the container's memory
    limit less Triton's own baseline (the pod's /dev/shm is added to that limit, on top, when rendered),
    and GPU memory from the pod's GPUs where gpus.product is a known one; None where unknown. The spec
    alone: a limit the pods get from their models (render/sizing.py) is not a capacity, or a server's
    room would be exactly what it holds."""
    memory = spec.capacity.memory
    limits = spec.resources.limits if spec.resources is not None else None
    if memory is None and limits and "memory" in limits:
        memory = max(bytes_from_quantity(limits["memory"]) - TRITON_BASELINE_BYTES, 0)
    gpu_memory = spec.capacity.gpu_memory
    return memory, spec.gpus.product_memory_bytes if gpu_memory is None else gpu_memory


@dataclass(frozen=True)
class ServerRoom:
    """A server as placement sees it."""

    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    replicas: int = 1
    memory_bytes: int | None = None  # one pod's room for models; None: unknown
    gpu_memory_bytes: int | None = None  # None: not counted
    leaving: bool = False  # being deleted: it takes nothing more, and what it holds moves away


@dataclass(frozen=True)
class ModelDemand:
    """A model as placement sees it: its figure, and where it may or must run."""

    namespace: str
    name: str
    memory_bytes: int
    source: MemorySource
    gpu_memory_bytes: int = 0
    selector: LabelSelector | None = None  # placed on a matching server with room
    server: str | None = None  # or named (serverRef, or its own server): counted there, never moved
    current: str | None = None  # the server it is placed on now, kept while it fits


@dataclass(frozen=True)
class PlacedModel:
    model: ModelDemand
    server: str | None  # None: unschedulable
    message: str = ""  # why no server takes it


@dataclass(frozen=True)
class ServerLoad:
    room: ServerRoom
    placed_bytes: int
    placed_gpu_bytes: int

    @property
    def free_bytes(self) -> int | None:
        return None if self.room.memory_bytes is None else self.room.memory_bytes - self.placed_bytes


@dataclass(frozen=True)
class Placement:
    models: tuple[PlacedModel, ...]  # in the order given
    servers: tuple[ServerLoad, ...]  # in the order given


class _Server:
    """A server's room while models are placed on it."""

    def __init__(self, room: ServerRoom) -> None:
        self.room = room
        self.placed = 0
        self.placed_gpu = 0
        self.groups: list[_Candidates] = []  # the candidate sets it is in, told when its room changes

    @property
    def free(self) -> int | None:
        return None if self.room.memory_bytes is None else self.room.memory_bytes - self.placed

    @property
    def accepting(self) -> bool:
        """It has pods, and stays: it may take models."""
        return self.room.replicas > 0 and not self.room.leaving

    def holds(self, model: ModelDemand) -> bool:
        gpu = self.room.gpu_memory_bytes
        free = self.free
        return (
            self.accepting
            and (free is None or model.memory_bytes <= free)
            and (gpu is None or model.gpu_memory_bytes <= gpu - self.placed_gpu)
        )

    def take(self, model: ModelDemand) -> None:
        keys = [(group, group.key(self)) for group in self.groups]
        self.placed += model.memory_bytes
        self.placed_gpu += model.gpu_memory_bytes
        for group, old in keys:
            group.moved(self, old)

    def free_words(self) -> str:
        """This server's room in a message: "1.2Gi free", "unknown capacity", "scaled to zero"."""
        if self.room.leaving:
            return "being deleted"
        if self.room.replicas == 0:
            return "scaled to zero"
        words = "capacity unknown" if self.free is None else f"{readable_bytes(self.free)} free"
        if self.room.gpu_memory_bytes is not None:
            words += f", {readable_bytes(self.room.gpu_memory_bytes - self.placed_gpu)} GPU free"
        return words


class _Candidates:
    """The servers one selector matches in one namespace, kept sorted by room left, so the best fit for a
    model is a binary search away rather than a pass over the fleet (10,000 models on 200 servers)."""

    def __init__(self, servers: list[_Server]) -> None:
        self.servers = servers
        self.members = set(servers)
        self.known = sorted(self.key(server) for server in servers if server.free is not None and server.accepting)
        self.unknown = [server for server in servers if server.free is None and server.accepting]
        self._by_name = {server.room.name: server for server in servers}
        for server in servers:
            server.groups.append(self)

    @staticmethod
    def key(server: _Server) -> tuple[int, str]:
        return (server.free or 0, server.room.name)

    def moved(self, server: _Server, old: tuple[int, str]) -> None:
        if server.free is None or not server.accepting:
            return
        del self.known[bisect.bisect_left(self.known, old)]
        bisect.insort(self.known, self.key(server))

    def best_fit(self, model: ModelDemand) -> _Server | None:
        """The server with the least room that holds the model; one of unknown capacity, the least loaded,
        only where none with a known capacity does (its room cannot be checked)."""
        for _, name in self.known[bisect.bisect_left(self.known, (model.memory_bytes, "")) :]:
            server = self._by_name[name]
            if server.holds(model):
                return server
        fitting = [server for server in self.unknown if server.holds(model)]
        return min(fitting, key=lambda server: (server.placed, server.room.name), default=None)


def readable_bytes(count: int) -> str:
    """A size a person reads at a glance, in Kubernetes' units: 1.2Gi, 512Mi, 20Mi, 0."""
    for suffix, unit in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if abs(count) >= unit:
            return f"{count / unit:.1f}".removesuffix(".0") + suffix
    return str(count)


def _unschedulable(model: ModelDemand, candidates: list[_Server]) -> str:
    """As a Pod's FailedScheduling: how many servers could take it, and each one's room."""
    gpu = f" and {readable_bytes(model.gpu_memory_bytes)} of GPU memory" if model.gpu_memory_bytes else ""
    needs = f"{readable_bytes(model.memory_bytes)} ({model.source.value}){gpu}"
    if not candidates:
        return (
            f"no TritonServer in namespace '{model.namespace}' matches {model.selector}: nothing can hold its {needs}"
        )
    roomiest = sorted(candidates, key=lambda server: (not server.accepting, -(server.free or 0), server.room.name))
    named = ", ".join(f"{server.room.name} ({server.free_words()})" for server in roomiest[:NAMED_CANDIDATES])
    more = f" and {len(roomiest) - NAMED_CANDIDATES} with less" if len(roomiest) > NAMED_CANDIDATES else ""
    return f"0/{len(candidates)} servers have room for {needs}: {named}{more}"


def _largest_first(model: ModelDemand) -> tuple[int, int, str, str]:
    return (-model.memory_bytes, -model.gpu_memory_bytes, model.namespace, model.name)


def place(servers: Iterable[ServerRoom], models: Iterable[ModelDemand]) -> Placement:
    """Every model on a server, or unschedulable with the reason.

    Models that name their server count there first, as they are (the user chose; they can over-commit it,
    and `place` shows it). Then the models with a selector, largest first: each already placed keeps its
    server while the server still matches, runs and holds it; the rest go where the least room is left
    after them (best fit decreasing: on servers of one size, never more than 11/9 of the fewest that could
    hold them, plus one). A model never goes
    where it does not fit."""
    servers, models = list(servers), list(models)
    state = {(room.namespace, room.name): _Server(room) for room in servers}
    where: dict[int, _Server | None] = {}
    for model in models:
        if model.selector is None:
            server = state.get((model.namespace, model.server or ""))
            if server is not None:
                server.take(model)
    groups: dict[tuple[str, str], _Candidates] = {}

    def candidates(model: ModelDemand) -> _Candidates:
        key = (model.namespace, str(model.selector))
        if key not in groups:
            assert model.selector is not None
            matching = [
                s
                for s in state.values()
                if s.room.namespace == model.namespace and model.selector.matches(s.room.labels)
            ]
            groups[key] = _Candidates(matching)
        return groups[key]

    placed = sorted(
        (index for index, model in enumerate(models) if model.selector is not None),
        key=lambda i: _largest_first(models[i]),
    )
    for index in placed:  # stable first: a model stays where it runs while that still holds it
        model = models[index]
        server = state.get((model.namespace, model.current or ""))
        if server is not None and server in candidates(model).members and server.holds(model):
            server.take(model)
            where[index] = server
    for index in placed:
        if index not in where:
            where[index] = server = candidates(models[index]).best_fit(models[index])
            if server is not None:
                server.take(models[index])
    results = []
    for index, model in enumerate(models):
        if model.selector is None:
            results.append(PlacedModel(model, model.server))
        elif (server := where[index]) is not None:
            results.append(PlacedModel(model, server.room.name))
        else:
            results.append(PlacedModel(model, None, _unschedulable(model, candidates(model).servers)))
    loads = tuple(ServerLoad(server.room, server.placed, server.placed_gpu) for server in state.values())
    return Placement(tuple(results), loads)


def model_figure(model: TritonModel) -> tuple[int, int, MemorySource]:
    """What the model counts for (host bytes, GPU bytes, whence): as declared in spec.memory, else the default."""
    declared = model.spec.memory
    gpu = declared.gpu if declared is not None and declared.gpu is not None else 0
    if declared is not None and declared.cpu is not None:
        return declared.cpu, gpu, MemorySource.DECLARED
    return DEFAULT_MODEL_BYTES, gpu, MemorySource.DEFAULT


def counted_gpu_bytes(model: TritonModel) -> int:
    """The GPU memory placement counts for the model: its status.memory's where Measured (a GPU figure nothing
    measured is the declared one there too), else as declared."""
    figure = model.status.memory if model.status is not None else None
    if figure is not None and figure.source == MemorySource.MEASURED.value:
        return figure.gpu_bytes
    return model_figure(model)[1]


def namespaced_name(model: TritonModel) -> tuple[str, str]:
    return (model.metadata.namespace or DEFAULT_NAMESPACE, model.name)


def room_of(server: TritonServer) -> ServerRoom:
    memory, gpu_memory = server_capacity(server.spec)
    namespace = server.metadata.namespace or DEFAULT_NAMESPACE
    return ServerRoom(namespace, server.name, server.metadata.labels, server.spec.replicas, memory, gpu_memory)


def demand_of(model: TritonModel, current: str | None = None) -> ModelDemand:
    """The model as declared (spec.memory, else the default), placed or counted where its spec says."""
    memory, _, source = model_figure(model)
    return ModelDemand(
        *namespaced_name(model),
        memory,
        source,
        counted_gpu_bytes(model),
        model.spec.server_selector,
        model.server_name,
        current,
    )


def placement_of(
    servers: Iterable[TritonServer], models: Iterable[TritonModel], current: Mapping[tuple[str, str], str] | None = None
) -> Placement:
    """The placement of servers and models read from files (by namespace and name); `current`: where
    selector models are bound already, by (namespace, model name)."""
    current = current or {}
    ordered = sorted(models, key=namespaced_name)
    return place(
        [room_of(server) for server in servers],
        [demand_of(model, current.get(namespaced_name(model))) for model in ordered],
    )
