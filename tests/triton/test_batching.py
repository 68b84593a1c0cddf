"""The batching verdict and the counter deltas, on counters shaped like the ones Triton reported
in tests/triton/test_batching_triton.py; each rule has a case where it fires and one where it must not."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as pb
from tritonclient.grpc import service_pb2

from tests.support.resources import SERVER, model_document
from triton_operator.api.parse import parse_resource
from triton_operator.cli.stats_command import summary_lines
from triton_operator.decide.batching_verdict import BatchingJudge
from triton_operator.decide.seen import Pass, Pod
from triton_operator.render.fleet import RenderedServer, plan_fleet
from triton_operator.triton.batching import (
    BatchingSummary,
    ModelStatistics,
    StatisticsTracker,
    Window,
    statistics_from_proto,
    summarize,
)
from triton_operator.triton.client import ModelState
from triton_operator.triton.sync import ReplicaReport

DELAY_US = 300_000


def config(
    ragged: bool = False, dims: list[int] | None = None, delay_us: int = DELAY_US, **batching: Any
) -> pb.ModelConfig:
    document = {
        "name": "m",
        "backend": "python",
        "maxBatchSize": 16,
        "dynamicBatching": {"maxQueueDelayMicroseconds": delay_us, **batching},
        "input": [{"name": "X", "dataType": "TYPE_FP32", "dims": dims or [-1], "allowRaggedBatch": ragged}],
    }
    return json_format.ParseDict(document, pb.ModelConfig())


def counters(sizes: dict[int, int], queue_ms: float, request_ms: float | None = None) -> ModelStatistics:
    """`sizes`: executions per batch size; every request spends `queue_ms` in the queue."""
    requests = sum(size * count for size, count in sizes.items())
    return ModelStatistics(
        requests=requests,
        request_ns=int(requests * (request_ms if request_ms is not None else queue_ms + 1) * 1e6),
        queue_ns=int(requests * queue_ms * 1e6),
        execution_ns=sum(sizes.values()) * 1_000_000,
        inferences=requests,
        executions=sum(sizes.values()),
        executions_by_size=MappingProxyType(sizes),
    )


def verdict(model: pb.ModelConfig, stats: ModelStatistics, seconds: float | None = None) -> BatchingSummary:
    return summarize("m", model, Window(stats, seconds))


# Measured: 32 mixed-length requests without allowRaggedBatch, 300 ms delay.
MIXED = counters({1: 16, 2: 5, 3: 2}, queue_ms=33)


def test_mixed_shapes_cut_short_name_allow_ragged_batch() -> None:
    summary = verdict(config(), MIXED)
    assert (summary.status, summary.reason) == ("False", "RaggedBatchNotAllowed")
    assert "'X'" in summary.message and "allowRaggedBatch: true" in summary.message
    assert summary.condition() == {
        "type": "BatchingEffective",
        "status": "False",
        "reason": "RaggedBatchNotAllowed",
        "message": summary.message,
    }
    assert round(summary.average_batch_size, 2) == 1.39 and summary.histogram() == "1x16 2x5 3x2"


def test_full_batches_are_effective_and_name_no_cause() -> None:
    summary = verdict(config(), counters({16: 2}, queue_ms=11))
    assert (summary.status, summary.reason) == ("True", "BatchesFill")
    assert summary.to_status()["averageBatchSize"] == 16.0 and summary.column() == "16.0/16 q 11.0ms"


def test_cut_short_batches_without_a_variable_input_get_the_generic_advice() -> None:
    summary = verdict(config(dims=[4]), MIXED)
    assert (summary.status, summary.reason) == ("False", "BatchesTooSmall")
    assert "allowRaggedBatch" not in summary.message


def test_lone_requests_that_waited_the_delay_are_not_judged() -> None:
    # 20 requests a second apart: each waits the whole delay and runs alone, as it should.
    lone = counters({1: 20}, queue_ms=DELAY_US / 1000)
    summary = verdict(config(), lone, seconds=20.0)
    assert (summary.status, summary.reason) == ("Unknown", "NotEnoughTraffic")
    assert summary.concurrency == pytest.approx(0.3, abs=0.01)


def test_too_few_requests_are_not_judged() -> None:
    summary = verdict(config(), counters({1: 10}, queue_ms=2))
    assert (summary.status, summary.reason) == ("Unknown", "NotEnoughTraffic")
    assert "10 requests" in summary.message
    # Requests answered from Triton's response cache run no execution.
    assert verdict(config(), ModelStatistics(requests=40, request_ns=40_000)).reason == "NotEnoughTraffic"


def test_without_dynamic_batching_there_is_nothing_to_judge() -> None:
    model = config()
    model.ClearField("dynamic_batching")
    assert verdict(model, MIXED).reason == "DynamicBatchingOff"


def test_a_model_that_does_not_batch_shows_no_batch_column() -> None:
    """maxBatchSize 0: every execution is one request, and "1.0/0" would read as a broken batcher."""
    model = config()
    model.ClearField("dynamic_batching")
    model.max_batch_size = 0
    summary = verdict(model, counters({1: 20}, queue_ms=1))
    assert summary.column() == "-"
    assert summary_lines([summary])[1].split()[3] == "-"  # `triton-operator stats`' AVG/MAX BATCH
    model.max_batch_size = 4
    batched = verdict(model, counters({1: 20}, queue_ms=1))
    assert batched.column() == "1.0/4 q 1.0ms" and summary_lines([batched])[1].split()[3] == "1.0/4"


def test_no_queue_delay_under_steady_concurrency() -> None:
    # Fixed dims, 10 requests in Triton at once over a minute, yet batches of about one.
    steady = counters({1: 500, 2: 50}, queue_ms=5, request_ms=1000)
    summary = verdict(config(dims=[4], delay_us=0), steady, seconds=60.0)
    assert (summary.status, summary.reason) == ("False", "NoQueueDelay")
    assert summary.concurrency == pytest.approx(10, rel=0.01)
    # The same batches with little traffic: nothing to judge.
    assert verdict(config(dims=[4], delay_us=0), steady, seconds=6000.0).reason == "NotEnoughTraffic"


def test_preferred_batch_size_that_never_fills() -> None:
    # Requests waited the whole delay (not cut short), 12 at once, batches of 3-4: 8 never fills.
    slow = counters({3: 30, 4: 20}, queue_ms=DELAY_US / 1000, request_ms=400)
    summary = verdict(config(dims=[4], preferredBatchSize=[8]), slow, seconds=5.7)
    assert (summary.status, summary.reason) == ("False", "PreferredBatchSizeNeverFills")
    assert "[8]" in summary.message and "most were of 3" in summary.message
    # Batches that reach the preferred size are fine.
    assert verdict(config(dims=[4], preferredBatchSize=[4]), slow, seconds=5.7).status == "True"
    # Triton reports the max batch size as the preferred one when none is set: not a preference.
    assert verdict(config(dims=[4], preferredBatchSize=[16]), slow, seconds=5.7).reason == "BatchesTooSmall"


def test_batches_as_large_as_the_traffic_allows_are_effective() -> None:
    # Three requests at once on average, batches of three: the batcher took all there was.
    summary = verdict(config(dims=[4]), counters({3: 20}, queue_ms=DELAY_US / 1000, request_ms=310), seconds=6.2)
    assert (summary.status, summary.reason) == ("True", "BatchesMatchTraffic")


def test_change_since_last_read_and_a_reload_give_no_negative_counts() -> None:
    tracker = StatisticsTracker()
    first = tracker.read("m", counters({1: 4}, queue_ms=1), now=100.0)
    assert first.seconds is None and first.stats.requests == 4  # since the model's load
    later = tracker.read("m", counters({1: 4, 16: 2}, queue_ms=1), now=102.5)
    assert later.seconds == 2.5 and dict(later.stats.executions_by_size) == {16: 2} and not later.reloaded
    reloaded = tracker.read("m", counters({2: 1}, queue_ms=1), now=103.0)
    assert reloaded.reloaded and reloaded.stats.requests == 2 and dict(reloaded.stats.executions_by_size) == {2: 1}
    assert "reloaded" in summarize("m", config(), reloaded).message
    tracker.retain([])
    assert tracker.read("m", counters({2: 1}, queue_ms=1), now=104.0).seconds is None


def test_replicas_add_counts_and_keep_concurrency_per_replica() -> None:
    one = Window(counters({1: 20}, queue_ms=0, request_ms=500), seconds=2.0)
    both = one + one
    assert both.stats.requests == 40 and both.replicas == 2
    assert summarize("m", config(), both).concurrency == summarize("m", config(), one).concurrency == 5.0


def test_statistics_response_versions_are_summed() -> None:
    response = json_format.ParseDict(
        {
            "modelStats": [
                {
                    "name": "m",
                    "version": str(version),
                    "inferenceCount": "32",
                    "executionCount": "2",
                    "inferenceStats": {
                        "success": {"count": "32", "ns": "64000000"},
                        "queue": {"count": "32", "ns": "32000000"},
                    },
                    "batchStats": [{"batchSize": "16", "computeInfer": {"count": "2", "ns": "2000000"}}],
                }
                for version in (1, 2)
            ]
        },
        service_pb2.ModelStatisticsResponse(),
    )
    stats = statistics_from_proto(response)["m"]
    assert (stats.requests, stats.executions, stats.inferences, dict(stats.executions_by_size)) == (64, 4, 64, {16: 4})
    assert stats.execution_ns == 4_000_000


@pytest.mark.parametrize(
    ("memory_usage", "expected"),
    [
        pytest.param([], None, id="nothing reported (the python backend)"),
        pytest.param([{"type": "CPU", "id": "0", "byteSize": "1000"}], 0, id="host memory only"),
        pytest.param(
            [
                {"type": "GPU", "id": "0", "byteSize": "300"},
                {"type": "CPU_PINNED", "id": "0", "byteSize": "7"},
                {"type": "GPU", "id": "1", "byteSize": "200"},
            ],
            500,
            id="every GPU's entries",
        ),
    ],
)
def test_the_gpu_memory_a_backend_reports_in_the_statistics(
    memory_usage: list[dict[str, str]], expected: int | None
) -> None:
    """Triton's memory_usage (MemoryUsage{type, id, byte_size}) is filled only by backends that report it."""
    response = json_format.ParseDict(
        {"modelStats": [{"name": "m", "version": "1", "memoryUsage": memory_usage}]},
        service_pb2.ModelStatisticsResponse(),
    )
    stats = statistics_from_proto(response)["m"]
    assert stats.gpu_memory_bytes == expected
    assert (stats + stats).gpu_memory_bytes == (None if expected is None else 2 * expected)  # two versions loaded
    assert stats.minus(ModelStatistics()) == stats  # not a counter: the figure as reported now


def batching_server(delay_us: int = DELAY_US, declared: bool = True) -> RenderedServer:
    """The server triton with model m batching dynamically (`delay_us`: a new revision), or without m."""
    document = {
        "backend": "python",
        "maxBatchSize": 16,
        "dynamicBatching": {"maxQueueDelayMicroseconds": delay_us},
        "input": [{"name": "X", "dataType": "TYPE_FP32", "dims": [-1]}],
    }
    server, _ = parse_resource(
        {**SERVER, "spec": {**SERVER["spec"], "modelRepository": {"pvc": {"claimName": "models"}}}}
    )
    model, _ = parse_resource(model_document(document))
    [rendered] = plan_fleet([server], [model] if declared else []).servers  # type: ignore[list-item]
    return rendered


POD = Pod("triton-0", "p0", "10.0.0.1:8001", deleting=False, models_ready="True", fingerprint="")


def read(rendered: RenderedServer, requests: int | None) -> Pass:
    """A pass that read m's counters on the pod (`requests` in full batches of 16); None: the pod's sync still runs."""
    if requests is None:
        return Pass(pods=[POD], waiting=[POD.name])
    revision = rendered.models[0].revision if rendered.models else ""
    report = ReplicaReport(POD.name, states={"m": ModelState("m", ready=True, revision=revision)})
    return Pass(
        pods=[POD], reports={POD.name: report}, statistics={POD.name: {"m": counters({16: requests // 16}, queue_ms=1)}}
    )


@pytest.mark.parametrize(
    ("passes", "judged_requests", "gone"),
    [
        ([(batching_server(), 64)], 64, set()),  # a first read judges the counters since the load
        ([(batching_server(), 64), (batching_server(), 64 + 0)], 64, set()),  # a quiet window keeps the last verdict
        (
            [(batching_server(), 64), (batching_server(delay_us=100), 0)],
            0,
            set(),
        ),  # a new revision is judged on its own window, quiet or not
        (
            [(batching_server(), 64), (batching_server(declared=False), 64)],
            None,
            {"m"},
        ),  # a model no longer declared: its metrics go
        (
            [(batching_server(), 64), (batching_server(), None), (batching_server(), 128)],
            64,
            set(),
        ),  # a pod still syncing keeps its last read
        (
            [(batching_server(), 64), (batching_server(), 128)],
            64,
            set(),
        ),  # each window is the change since the last read
    ],
    ids=["first-read", "quiet-window", "new-revision", "gone", "pod-syncing", "window"],
)
def test_the_batching_verdict_across_passes(
    passes: list[tuple[RenderedServer, int | None]], judged_requests: int | None, gone: set[str]
) -> None:
    judge = BatchingJudge()
    for rendered, requests in passes:
        went = judge.judge(rendered, read(rendered, requests))
    verdict = judge.verdict("m")
    assert (verdict.requests if verdict else None, went) == (judged_requests, gone)
    assert judge.summaries() == ({"m": verdict} if verdict else {})
