"""Is dynamic batching working? Triton's own statistics, turned into a verdict. Pure: no I/O.

Triton counts, per model since it was loaded: requests, their queue and compute time, executions,
and executions per batch size. Nothing else shows what the batcher really did. Measured on
Triton 2.5x (python backend, CPU; docs/triton-facts.md, "Batching and transport"), with many concurrent
requests and a long queue delay:

- requests of mixed lengths with `dims: [-1]` and no `allowRaggedBatch`: many small executions, and
  requests left the queue long before the delay: each batch was cut when the next request had another
  shape.
- the same with `allowRaggedBatch: true`, or with equal lengths: full batches.
- a lone request waits the whole delay and runs alone: that is the batcher working.
- a reload in place starts the counters from zero.

So "requests left the queue early in small batches" is the mark of a batch cut short while other
requests were waiting, which is what a variable-shape input without `allowRaggedBatch` does.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

from tritonclient.grpc import service_pb2

from ..protocol.triton_proto import model_config_pb2 as pb

CONDITION_TYPE = "BatchingEffective"
# The two reasons for Unknown: nothing to judge, or too little to judge it by.
DYNAMIC_BATCHING_OFF = "DynamicBatchingOff"
NOT_ENOUGH_TRAFFIC = "NotEnoughTraffic"
# Fewer requests than this in a window say more about chance than about the batcher.
MIN_REQUESTS = 16
# Requests in small batches that waited less than this share of the queue delay were cut short:
# a batch that is not cut waits the whole delay (or longer, behind a busy instance).
EARLY_SHARE = 0.8


@dataclass(frozen=True)
class ModelStatistics:
    """Triton's counters for one model (all versions): cumulative since its load, or a change."""

    requests: int = 0  # successful requests
    failures: int = (
        0  # requests Triton answered with an error (a model that raised, not one that returned an error response)
    )
    request_ns: int = 0  # their whole time in Triton, queue included
    queue_ns: int = 0
    execution_ns: int = 0  # input + infer + output, summed over executions
    inferences: int = 0  # batch elements executed (a request of batch 1 is one)
    executions: int = 0
    executions_by_size: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    # Not a counter: the GPU entries of Triton's memory_usage, what the backend reported holding on the
    # GPUs at its load; None where it reported nothing (the python backend never does).
    gpu_memory_bytes: int | None = None

    def __add__(self, other: ModelStatistics) -> ModelStatistics:
        """Two versions' (or replicas') statistics as one: counters and reported memory add."""
        sizes = dict(self.executions_by_size)
        for size, count in other.executions_by_size.items():
            sizes[size] = sizes.get(size, 0) + count
        counters = {name: getattr(self, name) + getattr(other, name) for name in _COUNTERS}
        reported = [part for part in (self.gpu_memory_bytes, other.gpu_memory_bytes) if part is not None]
        return ModelStatistics(
            **counters, executions_by_size=MappingProxyType(sizes), gpu_memory_bytes=sum(reported) if reported else None
        )

    def minus(self, earlier: ModelStatistics) -> ModelStatistics | None:
        """The change since `earlier` (memory as reported now), or None when a counter went down (the model
        was reloaded)."""
        counters = {name: getattr(self, name) - getattr(earlier, name) for name in _COUNTERS}
        sizes = {
            size: count - earlier.executions_by_size.get(size, 0) for size, count in self.executions_by_size.items()
        }
        dropped = earlier.executions_by_size.keys() - self.executions_by_size.keys()
        if dropped or min([*counters.values(), *sizes.values()], default=0) < 0:
            return None
        return ModelStatistics(
            **counters,
            executions_by_size=MappingProxyType({s: c for s, c in sizes.items() if c}),
            gpu_memory_bytes=self.gpu_memory_bytes,
        )


_COUNTERS = tuple(f.name for f in fields(ModelStatistics) if f.name not in ("executions_by_size", "gpu_memory_bytes"))


def reported_gpu_bytes(memory_usage: Iterable[service_pb2.MemoryUsage]) -> int | None:
    """A model's GPU memory from one statistics entry's memory_usage (type CPU, CPU_PINNED or GPU, device id,
    byte_size): its GPU entries summed, 0 where the backend reported host memory only, None where it
    reported nothing."""
    entries = list(memory_usage)
    return sum(entry.byte_size for entry in entries if entry.type == "GPU") if entries else None


def statistics_from_proto(response: service_pb2.ModelStatisticsResponse) -> dict[str, ModelStatistics]:
    """Per model name, Triton's statistics response as plain counters (versions summed)."""
    models: dict[str, ModelStatistics] = {}
    for stats in response.model_stats:
        inference = stats.inference_stats
        current = ModelStatistics(
            requests=inference.success.count,
            failures=inference.fail.count,
            request_ns=inference.success.ns,
            queue_ns=inference.queue.ns,
            execution_ns=sum(b.compute_input.ns + b.compute_infer.ns + b.compute_output.ns for b in stats.batch_stats),
            inferences=stats.inference_count,
            executions=stats.execution_count,
            executions_by_size=MappingProxyType(
                {
                    batch.batch_size: batch.compute_infer.count
                    for batch in stats.batch_stats
                    if batch.compute_infer.count
                }
            ),
            gpu_memory_bytes=reported_gpu_bytes(stats.memory_usage),
        )
        models[stats.name] = models[stats.name] + current if stats.name in models else current
    return models


@dataclass(frozen=True)
class Window:
    """What a model did between two reads; `seconds` is None for a first read (since its load)."""

    stats: ModelStatistics
    seconds: float | None = None
    replicas: int = 1
    reloaded: bool = False  # the counters started over within the window

    def __add__(self, other: Window) -> Window:
        """Two replicas' windows as one model's: counters add, concurrency stays per replica."""
        seconds = None if self.seconds is None or other.seconds is None else max(self.seconds, other.seconds)
        return Window(
            self.stats + other.stats, seconds, self.replicas + other.replicas, self.reloaded or other.reloaded
        )


class StatisticsTracker:
    """Remembers the last read per key (say replica and model) and gives the change since then.

    Put the model's revision into the key where it is known: a reload then starts a new window
    even if the new counters have already outgrown the old ones.
    """

    def __init__(self) -> None:
        self._last: dict[Hashable, tuple[ModelStatistics, float]] = {}

    def read(self, key: Hashable, current: ModelStatistics, now: float | None = None) -> Window:
        now = time.monotonic() if now is None else now
        last = self._last.get(key)
        self._last[key] = (current, now)
        if last is None:
            return Window(current)
        earlier, then = last
        change = current.minus(earlier)
        if change is None:  # reloaded: everything counted now happened since the reload
            return Window(current, now - then, reloaded=True)
        return Window(change, now - then)

    def retain(self, keys: Iterable[Hashable]) -> None:
        """Forget every key but these (models unloaded, replicas gone)."""
        keep = set(keys)
        self._last = {key: value for key, value in self._last.items() if key in keep}


def ragged_candidates(config: pb.ModelConfig) -> list[str]:
    """Inputs with a variable dim and no allowRaggedBatch: Triton batches their requests only
    with requests of the same shape."""
    return [
        tensor.name
        for tensor in config.input
        if -1 in tensor.dims and not tensor.allow_ragged_batch and not tensor.is_shape_tensor
    ]


@dataclass(frozen=True)
class BatchingSummary:
    """One model's batching over a window, with the verdict (`condition()`) to show users."""

    model: str
    requests: int
    executions: int
    average_batch_size: float
    max_batch_size: int  # configured
    largest_batch_size: int  # executed in the window
    batch_sizes: tuple[tuple[int, int], ...]  # (batch size, executions), smallest first
    queue_ms_per_request: float
    compute_ms_per_execution: float
    concurrency: float | None  # requests in Triton at once, on average per replica
    seconds: float | None
    status: str  # "True", "False" or "Unknown"
    reason: str
    message: str

    def condition(self) -> dict[str, str]:
        """The `BatchingEffective` condition, as Kubernetes conditions spell it."""
        return {"type": CONDITION_TYPE, "status": self.status, "reason": self.reason, "message": self.message}

    def to_status(self) -> dict[str, object]:
        """The summary for a status field: JSON-ready, camelCase."""
        return {
            "requests": self.requests,
            "executions": self.executions,
            "averageBatchSize": round(self.average_batch_size, 2),
            "maxBatchSize": self.max_batch_size,
            "batchSizes": {str(size): count for size, count in self.batch_sizes},
            "queueMsPerRequest": round(self.queue_ms_per_request, 3),
            "computeMsPerExecution": round(self.compute_ms_per_execution, 3),
            **({"windowSeconds": round(self.seconds, 1)} if self.seconds is not None else {}),
        }

    def column(self) -> str:
        """Short enough for a table: average / configured max batch, queue time per request; "-" for a model
        that does not batch (maxBatchSize 0), whose every execution is one request."""
        if not self.executions or not self.max_batch_size:
            return "-"
        return f"{self.average_batch_size:.1f}/{self.max_batch_size} q {self.queue_ms_per_request:.1f}ms"

    def describe(self) -> str:
        """The verdict in one line, for people."""
        return f"{CONDITION_TYPE}={self.status} {self.reason}: {self.message}"

    def histogram(self) -> str:
        return " ".join(f"{size}x{count}" for size, count in self.batch_sizes) or "-"


def _verdict(config: pb.ModelConfig, stats: ModelStatistics, concurrency: float | None) -> tuple[str, str, str]:
    if not config.HasField("dynamic_batching") or config.max_batch_size == 0:
        return "Unknown", DYNAMIC_BATCHING_OFF, "dynamic batching is not configured: every request runs alone"
    if stats.requests < MIN_REQUESTS or not stats.executions:  # cache hits answer without executing
        return (
            "Unknown",
            NOT_ENOUGH_TRAFFIC,
            f"{stats.requests} requests in the window; {MIN_REQUESTS} are needed to judge",
        )
    batching = config.dynamic_batching
    preferred = sorted(batching.preferred_batch_size)
    if preferred == [config.max_batch_size]:
        preferred = []  # what Triton reports when none was set; the same as none
    target = preferred[-1] if preferred else config.max_batch_size
    average = stats.inferences / stats.executions
    delay_us = batching.max_queue_delay_microseconds
    in_small = sum(size * count for size, count in stats.executions_by_size.items() if size < target)
    # A batch below the target leaves before the delay only when cut short: the next request
    # could not join it. Requests' queue time bounds the queue time of those in small batches.
    cut_short = delay_us > 0 and in_small > 0 and stats.queue_ns / in_small < EARLY_SHARE * delay_us * 1000
    company = max(concurrency or 0.0, average)
    facts = f"executions averaged {average:.1f} requests (target {target})"
    if average >= target / 2:
        return "True", "BatchesFill", facts
    if not cut_short and company < 2:
        return "Unknown", NOT_ENOUGH_TRAFFIC, f"{facts} with {company:.1f} requests in Triton at once: too few to batch"
    if not cut_short and average >= min(target, company) / 2:
        return (
            "True",
            "BatchesMatchTraffic",
            f"{facts} with {company:.1f} requests in Triton at once: as many as traffic allows",
        )
    why = f"{facts} while " + (
        "batches left the queue before the delay: other requests were waiting but could not join"
        if cut_short
        else f"{company:.1f} requests were in Triton at once"
    )
    causes = _causes(config, preferred, stats)
    return "False", causes[0][0], "; ".join([why, *(advice for _, advice in causes)])


def _causes(config: pb.ModelConfig, preferred: list[int], stats: ModelStatistics) -> list[tuple[str, str]]:
    """Causes of small batches in the config, the likeliest first, each with what to change."""
    causes = []
    if ragged := ragged_candidates(config):
        names = ", ".join(f"'{name}'" for name in ragged)
        causes.append(
            (
                "RaggedBatchNotAllowed",
                f"input {names} has a variable shape without allowRaggedBatch, so only requests of equal shape "
                "are batched together: set allowRaggedBatch: true if the model "
                "handles ragged input, or pad requests to one shape",
            )
        )
    if config.dynamic_batching.max_queue_delay_microseconds == 0:
        causes.append(
            (
                "NoQueueDelay",
                "maxQueueDelayMicroseconds is 0, so a batch leaves as soon as an instance is free: "
                "set it to a share of your latency budget (e.g. 1000-100000) so requests wait for company",
            )
        )
    if preferred and not any(stats.executions_by_size.get(size) for size in preferred):
        common = max(stats.executions_by_size.items(), key=lambda item: item[1])[0]
        causes.append(
            (
                "PreferredBatchSizeNeverFills",
                f"no execution reached a preferred batch size {preferred} (most were of {common}): "
                "lower preferredBatchSize to what traffic fills, or raise maxQueueDelayMicroseconds",
            )
        )
    return causes or [
        (
            "BatchesTooSmall",
            "raise maxQueueDelayMicroseconds so requests wait longer for company, or run fewer instances",
        )
    ]


def summarize(name: str, config: pb.ModelConfig, window: Window) -> BatchingSummary:
    """Average and histogram of executed batch sizes, queue time, and the verdict for one model."""
    stats = window.stats
    concurrency = stats.request_ns / 1e9 / window.seconds / window.replicas if window.seconds else None
    status, reason, message = _verdict(config, stats, concurrency)
    if window.reloaded:
        message += " (the model reloaded within the window: counted since the reload)"
    return BatchingSummary(
        model=name,
        requests=stats.requests,
        executions=stats.executions,
        average_batch_size=stats.inferences / stats.executions if stats.executions else 0.0,
        max_batch_size=config.max_batch_size,
        largest_batch_size=max(stats.executions_by_size, default=0),
        batch_sizes=tuple(sorted(stats.executions_by_size.items())),
        queue_ms_per_request=stats.queue_ns / 1e6 / stats.requests if stats.requests else 0.0,
        compute_ms_per_execution=stats.execution_ns / 1e6 / stats.executions if stats.executions else 0.0,
        concurrency=concurrency,
        seconds=window.seconds,
        status=status,
        reason=reason,
        message=message,
    )
