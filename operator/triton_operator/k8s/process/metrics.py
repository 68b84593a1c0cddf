"""The operator's Prometheus metrics: one registry, so tests and the dashboard read the same names."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ...api.status_fields import MemoryStatus
from ...triton.batching import BatchingSummary

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILES = Counter(
    "triton_operator_reconciles",
    "Reconciles of one TritonServer and its models, by outcome (ok, error).",
    ["namespace", "server", "outcome"],
    registry=REGISTRY,
)
RECONCILE_SECONDS = Histogram(
    "triton_operator_reconcile_seconds",
    "Duration of one pass over a TritonServer and its models (render, apply, sync every pod, statuses).",
    ["namespace", "server"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)
CONTROL_CALLS = Counter(
    "triton_operator_control_calls",
    "Control-API calls (load, reload, unload, heal: a reload restarting a model that "
    "failed every request) to Triton pods, by outcome (ok, error).",
    ["namespace", "server", "model", "pod", "action", "outcome"],
    registry=REGISTRY,
)
CONTROL_CALL_SECONDS = Histogram(
    "triton_operator_control_call_seconds",
    "Duration of control-API calls to Triton pods, by server and action.",
    ["namespace", "server", "action"],  # not per model and pod: 14 series each, tens of thousands a big server
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)
MODELS = Gauge(
    "triton_operator_models",
    "TritonModels of a server by state (Ready, Loading, Failed, Invalid).",
    ["namespace", "server", "state"],
    registry=REGISTRY,
)
MODEL_MEMORY_BYTES = Gauge(
    "triton_operator_model_memory_bytes",
    "What one copy of a TritonModel costs on a pod (memory: cpu or gpu), as its status.memory says: each measured "
    "(gpu: as its backend reported it to Triton, or its python stubs hold), else declared "
    "in spec.memory, or the default; the figure placement counts.",
    ["namespace", "server", "model", "memory"],
    registry=REGISTRY,
)
PODS = Gauge(
    "triton_operator_pods",
    "Pods of a TritonServer by what its last pass saw: Synced; Unreachable (no answer, or its key refused: "
    "its readiness is left as it was); Waiting (its sync still running after one read timeout).",
    ["namespace", "server", "state"],
    registry=REGISTRY,
)
SERVER_REPLICAS = Gauge(
    "triton_operator_server_replicas", "Pods a TritonServer asks for.", ["namespace", "server"], registry=REGISTRY
)
SERVER_READY_REPLICAS = Gauge(
    "triton_operator_server_ready_replicas",
    "Pods of a TritonServer with every model loaded (their models-ready condition is True).",
    ["namespace", "server"],
    registry=REGISTRY,
)
BATCHING_EFFECTIVE = Gauge(
    "triton_operator_batching_effective",
    "1 while a model's executions batch as its traffic allows, 0 while they stay small (BatchingEffective=False); "
    "absent while there is nothing to judge.",
    ["namespace", "server", "model"],
    registry=REGISTRY,
)
AVERAGE_BATCH_SIZE = Gauge(
    "triton_operator_average_batch_size",
    "Requests per execution of a model over the operator's last window of Triton's statistics, summed over its pods.",
    ["namespace", "server", "model"],
    registry=REGISTRY,
)
ROLLOUTS = Counter(
    "triton_operator_rollouts_total",
    "Canary rollouts judged, by outcome: promoted to every pod, or rolled_back to the previous revision.",
    ["namespace", "server", "model", "outcome"],
    registry=REGISTRY,
)
ROLLOUT_BAKE_SECONDS = Histogram(
    "triton_operator_rollout_bake_seconds",
    "How long a canary served its new revision before the verdict.",
    ["namespace", "server"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600),
    registry=REGISTRY,
)

LEADER = Gauge(
    "triton_operator_leader",
    "1 while this operator process reconciles (it holds the Lease, or runs "
    "without leader election), 0 while it stands by.",
    registry=REGISTRY,
)
API_SERVER_REACHABLE = Gauge(
    "triton_operator_api_server_reachable",
    "1 while the API server answers this operator process, 0 from a request it did not answer (no connection, "
    "no answer in time, a 5xx) until it answers again; meanwhile the operator retries, and its pods serve on.",
    registry=REGISTRY,
)
COLLECTION_SECONDS = Histogram(
    "triton_operator_gc_collection_seconds",
    "Python's garbage collections in the operator by generation (2: full); nothing else runs meanwhile, "
    "so a long one delays whatever change arrives during it.",
    ["generation"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
    registry=REGISTRY,
)


def observe_collection(generation: int, seconds: float) -> None:
    """One of Python's collections and how long it held the process (speed/collector.py tells it)."""
    COLLECTION_SECONDS.labels(str(generation)).observe(seconds)


def export_batching(namespace: str, server: str, summaries: Mapping[str, BatchingSummary], gone: Iterable[str]) -> None:
    """Set the batching gauges of a server's models, and drop those of the models `gone`."""
    for model in gone:
        BATCHING_EFFECTIVE.remove(namespace, server, model)  # a series that is not there is no error
        AVERAGE_BATCH_SIZE.remove(namespace, server, model)
    for model, summary in summaries.items():
        AVERAGE_BATCH_SIZE.labels(namespace, server, model).set(summary.average_batch_size)
        if summary.status == "Unknown":
            BATCHING_EFFECTIVE.remove(namespace, server, model)
        else:
            BATCHING_EFFECTIVE.labels(namespace, server, model).set(1 if summary.status == "True" else 0)


def export_model_memory(namespace: str, server: str, figures: Mapping[str, MemoryStatus], gone: Iterable[str]) -> None:
    """Set the memory gauges of a server's TritonModels, and drop those of the models `gone`."""
    for model in gone:
        for memory in ("cpu", "gpu"):
            MODEL_MEMORY_BYTES.remove(namespace, server, model, memory)  # a series that is not there is no error
    for model, figure in figures.items():
        MODEL_MEMORY_BYTES.labels(namespace, server, model, "cpu").set(figure.cpu_bytes)
        MODEL_MEMORY_BYTES.labels(namespace, server, model, "gpu").set(figure.gpu_bytes)
