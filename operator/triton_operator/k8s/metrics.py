"""The operator's Prometheus metrics: one registry, so tests and the dashboard read the same names."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILES = Counter(
    "triton_operator_reconciles",
    "Reconciles of one TritonServer and its models, by outcome (ok, error).",
    ["namespace", "server", "outcome"],
    registry=REGISTRY,
)
CONTROL_CALLS = Counter(
    "triton_operator_control_calls",
    "Control-API calls (load, reload, unload) to Triton pods, by outcome (ok, error).",
    ["namespace", "server", "model", "pod", "action", "outcome"],
    registry=REGISTRY,
)
CONTROL_CALL_SECONDS = Histogram(
    "triton_operator_control_call_seconds",
    "Duration of control-API calls to Triton pods.",
    ["namespace", "server", "model", "pod", "action"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)
MODELS = Gauge(
    "triton_operator_models",
    "TritonModels of a server by state (Ready, Loading, Failed, Invalid).",
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
