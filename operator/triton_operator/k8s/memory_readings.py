"""Measured memory: each pod's memory sidecar read after its models change, and each model's figure.

A server with `memoryReader.enabled` has a sidecar in every pod serving the pod's python stubs
(memory_reader.py); this reads it when what a pod serves has changed since its last reading (a load,
a reload, an unload), at most once per pod every `memory_read_seconds` (a change sooner wakes the
worker when that time is up), and attributes the stubs to the models ready there (memory.py).

Fail-static: a reader that does not answer, or answers nonsense, changes nothing. The pod keeps its
last reading (or has none, the figure staying Declared or Default) and is read again at a later pass;
its standing (readiness, status, settledness of the pass) is never the reader's to change.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import aiohttp
from google.protobuf import json_format

from ..api.status import MemoryStatus
from ..memory import READER_PATH, READER_PORT, ModelMemory, StubProcess, model_memory
from ..protocol.model_config import model_config_pb2 as pb
from ..render.fleet import RenderedServer
from . import conditions
from .state import Pod, ServerKey
from .status import Pass

logger = logging.getLogger(__name__)

READ_TIMEOUT_SECONDS = 2  # a /proc walk of 50 stubs takes 15-35 ms: a reader this slow is as good as absent
Served = frozenset[tuple[str, str]]  # the (model, revision) pairs ready on a pod


@dataclass(frozen=True)
class PodReading:
    """What one reading of a pod's sidecar found, and what the pod served then."""

    at: float  # the clock's (monotonic) time of the reading
    measured_at: str  # the same, as the status says it
    served: Served
    models: Mapping[str, ModelMemory]


def served_on(pod: Pod, this_pass: Pass) -> Served:
    """The models ready on the pod at the revision it should run."""
    report = this_pass.reports.get(pod.name)
    if report is None or report.error:
        return frozenset()
    desired = this_pass.desired_on(pod.name)
    return frozenset((name, state.revision) for name, state in report.states.items() if state.ready and name in desired and state.revision == desired[name].revision)


def wait_before_reading(last: PodReading | None, served: Served, now: float, interval: float) -> float | None:
    """None: no reading is wanted (nothing served, or nothing changed since the last one); else the
    seconds until one may be made (0: now)."""
    if not served or (last is not None and last.served == served):
        return None
    return 0.0 if last is None else max(0.0, last.at + interval - now)


def measured_figures(readings: Iterable[PodReading]) -> dict[str, MemoryStatus]:
    """Each model's Measured host memory: the largest of its pods' figures. Placement counts one copy
    of a model against each pod's memory, and the pods run alike, so the copy that holds most (one
    that allocated more under its traffic) is the one a pod must have room for."""
    figures: dict[str, MemoryStatus] = {}
    for reading in readings:
        for model, memory in reading.models.items():
            if model not in figures or memory.private_bytes > figures[model].cpu_bytes:
                figures[model] = MemoryStatus(cpu_bytes=memory.private_bytes, source="Measured", measured_at=reading.measured_at)
    return figures


class MemoryReadings:
    """The last reading of each pod of one server, and the wake of a reading put off by the interval."""

    def __init__(self, key: ServerKey, wake: Callable[[], None], interval_seconds: float, clock: Callable[[], float] = time.monotonic):
        self.key = key
        self.wake = wake
        self.interval = interval_seconds
        self.clock = clock
        self.readings: dict[str, PodReading] = {}  # pod uid -> its last reading
        self.session: aiohttp.ClientSession | None = None
        self.woken: asyncio.TimerHandle | None = None

    def figures(self) -> dict[str, MemoryStatus]:
        """Each Triton model's Measured figure, for the models a pod's last reading attributed."""
        return measured_figures(self.readings.values())

    async def read(self, rendered: RenderedServer, this_pass: Pass) -> None:
        """Read the pods whose served models changed since their last reading, as the interval lets."""
        if not rendered.server.spec.memory_reader.enabled:
            self.readings.clear()
            return
        live = {pod.uid for pod in this_pass.pods if not pod.deleting}
        self.readings = {uid: reading for uid, reading in self.readings.items() if uid in live}
        now, due, later = self.clock(), [], []
        for pod in this_pass.pods:
            served = served_on(pod, this_pass)
            wait = wait_before_reading(self.readings.get(pod.uid), served, now, self.interval) if pod.address and not pod.deleting else None
            if wait == 0:
                due.append((pod, served))
            elif wait is not None:
                later.append(wait)
        if later:
            self._wake_in(min(later))
        await asyncio.gather(*(self._read_pod(pod, served, this_pass) for pod, served in due))

    async def _read_pod(self, pod: Pod, served: Served, this_pass: Pass) -> None:
        assert pod.address is not None
        url = f"http://{pod.address.rpartition(':')[0]}:{READER_PORT}{READER_PATH}"
        if self.session is None:
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=READ_TIMEOUT_SECONDS))
        try:
            async with self.session.get(url) as response:
                response.raise_for_status()
                stubs = [StubProcess.from_json(entry) for entry in (await response.json())["stubs"]]
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, TypeError) as error:
            logger.warning("the memory sidecar of pod %s (TritonServer %s/%s) was not read: %r; its models' figures stay as they were", pod.name, *self.key, error)
            return
        desired = this_pass.desired_on(pod.name)
        configs = {name: json_format.Parse(desired[name].config_json, pb.ModelConfig(), ignore_unknown_fields=True) for name, _ in served}
        self.readings[pod.uid] = PodReading(self.clock(), conditions.now(), served, model_memory(stubs, configs))

    def _wake_in(self, seconds: float) -> None:
        """A pass when the interval lets the put-off reading be made (one timer at a time)."""
        if self.woken is None or self.woken.when() <= asyncio.get_running_loop().time():
            self.woken = asyncio.get_running_loop().call_later(seconds, self.wake)

    async def close(self) -> None:
        if self.woken is not None:
            self.woken.cancel()
        if self.session is not None:
            await self.session.close()
