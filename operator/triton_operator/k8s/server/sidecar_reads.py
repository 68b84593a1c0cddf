"""Measured memory: each pod's memory sidecar read after its models change, the GPU memory Triton's
statistics report, and each model's figure.

A server with `memoryReader.enabled` has a sidecar in every pod serving the pod's python stubs, with
their GPU memory where it can see the GPUs (memory/sidecar.py); this reads it when what a pod serves has
changed since its last reading (a load, a reload, an unload), at most once per pod every
`memory_read_seconds` (a change sooner wakes the worker when that time is up), and attributes the stubs
to the models ready there (memory/attribution.py). Any server's models whose backend reports its memory (Triton's
statistics `memory_usage`, read every pass: ONNX Runtime and TensorRT can, the python backend never
does) have their GPU figure from that report, which is the backend's own and wins over the stubs'.

Fail-static: a reader that does not answer, or answers nonsense, changes nothing. The pod keeps its
last reading (or has none, the figure staying Declared or Default) and is read again at a later pass;
its standing (readiness, status, settledness of the pass) is never the reader's to change. Whatever
answers on the pod's port is read as a stranger's: within ANSWER_LIMIT_BYTES, read as it comes and
dropped past that, uncompressed, within READ_TIMEOUT_SECONDS, and parsed only as deep as the table
goes (memory.parse_table); anything else is a warning naming the pod and what was wrong.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import aiohttp

from ...decide import conditions
from ...decide.seen import Pass, Pod, ServerKey
from ...memory.attribution import (
    READER_PATH,
    MeasuredMemory,
    MeasuredPart,
    ModelMemory,
    StubProcess,
    model_memory,
    parse_table,
)
from ...protocol.names import READER_PORT
from ...render.fleet import RenderedServer
from ...triton.batching import ModelStatistics

logger = logging.getLogger(__name__)

# far above a pod's table of stubs and far below the operator's own memory limit (512 MiB)
ANSWER_LIMIT_BYTES = 1 << 20
# far above a /proc walk of a pod's stubs (bench/RESULTS.md, "A python model's host memory"): a reader this
# slow is as good as absent
READ_TIMEOUT_SECONDS = 2
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
    return frozenset(
        (name, state.revision)
        for name, state in report.states.items()
        if state.ready and name in desired and state.revision == desired[name].revision
    )


def wait_before_reading(last: PodReading | None, served: Served, now: float, interval: float) -> float | None:
    """None: no reading is wanted (nothing served, or nothing changed since the last one); else the
    seconds until one may be made (0: now)."""
    if not served or (last is not None and last.served == served):
        return None
    return 0.0 if last is None else max(0.0, last.at + interval - now)


def reported_gpu(
    last: Mapping[str, MeasuredPart], statistics: Mapping[str, ModelStatistics], served: Served, now: str
) -> dict[str, MeasuredPart]:
    """A pod's GPU figures as its served models' backends report them in this pass's statistics; a figure
    as it was keeps its time, so an unchanged report writes no status."""
    figures = {}
    for name, _ in served:
        reported = statistics[name].gpu_memory_bytes if name in statistics else None
        if reported is not None:
            figures[name] = last[name] if name in last and last[name][0] == reported else (reported, now)
    return figures


def pod_figures(reading: PodReading | None, reported: Mapping[str, MeasuredPart]) -> dict[str, MeasuredMemory]:
    """One pod's measured figures: host memory from its sidecar's stubs; GPU memory as the backend reported
    it, else the stubs' where the sidecar could read the GPUs."""
    models = {} if reading is None else reading.models
    figures = {}
    for name in models.keys() | reported.keys():
        cpu: MeasuredPart | None = None
        stubs_gpu: MeasuredPart | None = None
        if reading is not None and name in models:
            cpu = (models[name].private_bytes, reading.measured_at)
            gpu_bytes = models[name].gpu_bytes
            stubs_gpu = None if gpu_bytes is None else (gpu_bytes, reading.measured_at)
        figures[name] = MeasuredMemory(cpu=cpu, gpu=reported.get(name, stubs_gpu))
    return figures


def measured_figures(pods: Iterable[Mapping[str, MeasuredMemory]]) -> dict[str, MeasuredMemory]:
    """Each model's Measured figure, part by part the largest of its pods'. Placement counts one copy of
    a model against each pod's memory, and the pods run alike, so the copy that holds most (one that
    allocated more under its traffic) is the one a pod must have room for."""
    figures: dict[str, MeasuredMemory] = {}
    for found in pods:
        for model, figure in found.items():
            before = figures.get(model, MeasuredMemory())
            figures[model] = MeasuredMemory(cpu=_larger(before.cpu, figure.cpu), gpu=_larger(before.gpu, figure.gpu))
    return figures


def _larger(one: MeasuredPart | None, other: MeasuredPart | None) -> MeasuredPart | None:
    if one is None or other is None:
        return one or other
    return other if other[0] > one[0] else one


async def read_sidecar(session: aiohttp.ClientSession, url: str) -> list[StubProcess]:
    """The stubs a pod's sidecar lists; a ValueError where its answer is larger than ANSWER_LIMIT_BYTES
    (nothing more of it is read) or is not a table."""
    async with session.get(url, headers={"Accept-Encoding": "identity"}) as response:
        response.raise_for_status()
        body = bytearray()
        async for chunk in response.content.iter_chunked(64 << 10):
            body += chunk
            if len(body) > ANSWER_LIMIT_BYTES:
                raise ValueError(f"its answer is larger than {ANSWER_LIMIT_BYTES} bytes")
    return parse_table(bytes(body))


class MemoryReadings:
    """The last reading of each pod of one server, and the wake of a reading put off by the interval."""

    def __init__(
        self,
        key: ServerKey,
        wake: Callable[[], None],
        interval_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        port: int = READER_PORT,  # the sidecar's, on each pod's IP
    ):
        self.key = key
        self.wake = wake
        self.interval = interval_seconds
        self.clock = clock
        self.port = port
        self.readings: dict[str, PodReading] = {}  # pod uid -> its last reading
        self.reported: dict[
            str, dict[str, MeasuredPart]
        ] = {}  # pod uid -> its models' GPU memory as their backends report it
        self.session: aiohttp.ClientSession | None = None
        self.woken: asyncio.TimerHandle | None = None

    def figures(self) -> dict[str, MeasuredMemory]:
        """Each Triton model's Measured figure, for the models a pod's last reading attributed or whose
        backend reported its memory."""
        return measured_figures(
            pod_figures(self.readings.get(uid), self.reported.get(uid, {}))
            for uid in self.readings.keys() | self.reported.keys()
        )

    async def read(self, rendered: RenderedServer, this_pass: Pass) -> None:
        """Take the GPU memory this pass's statistics report, and read the pods whose served models
        changed since their last reading, as the interval lets."""
        live = {pod.uid for pod in this_pass.pods if not pod.deleting}
        self.reported = {uid: figures for uid, figures in self.reported.items() if uid in live}
        for pod in this_pass.pods:
            if pod.uid in live and pod.name in this_pass.statistics:
                self.reported[pod.uid] = reported_gpu(
                    self.reported.get(pod.uid, {}),
                    this_pass.statistics[pod.name],
                    served_on(pod, this_pass),
                    conditions.now(),
                )
        if not rendered.server.spec.memory_reader.enabled:
            self.readings.clear()
            return
        self.readings = {uid: reading for uid, reading in self.readings.items() if uid in live}
        now, due, later = self.clock(), [], []
        for pod in this_pass.pods:
            served = served_on(pod, this_pass)
            wait = (
                wait_before_reading(self.readings.get(pod.uid), served, now, self.interval)
                if pod.address and not pod.deleting
                else None
            )
            if wait == 0:
                due.append((pod, served))
            elif wait is not None:
                later.append(wait)
        if later:
            self._wake_in(min(later))
        await asyncio.gather(*(self._read_pod(pod, served, this_pass) for pod, served in due))

    async def _read_pod(self, pod: Pod, served: Served, this_pass: Pass) -> None:
        assert pod.address is not None
        url = f"http://{pod.address.rpartition(':')[0]}:{self.port}{READER_PATH}"
        if self.session is None:  # a compressed answer is read as it came: inflating it would lift the limit
            self.session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=READ_TIMEOUT_SECONDS), auto_decompress=False
            )
        try:
            stubs = await read_sidecar(self.session, url)
        except (TimeoutError, aiohttp.ClientError, ValueError) as error:
            logger.warning(
                "the memory sidecar of pod %s (TritonServer %s/%s) was not read: "
                "%s; its models' figures stay as they were",
                pod.name,
                *self.key,
                str(error) or type(error).__name__,
            )
            return
        desired = this_pass.desired_on(pod.name)
        configs = {name: desired[name].parsed_config() for name, _ in served}
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
