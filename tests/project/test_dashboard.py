"""The Grafana dashboard queries only metrics that exist, with labels they carry: Triton's names
read from a real tritonserver's /metrics, the operator's from its own registry."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support.chart import CHART, render
from tests.support.models import DOUBLING_CODE, load, python_model
from tests.support.ports import free_ports
from triton_operator.api.server import TritonServerSpec
from triton_operator.k8s.process.metrics import REGISTRY
from triton_operator.local.tritonserver import LocalTriton, Ports

DASHBOARD_FILE = CHART / "dashboards/triton-operator.json"
# Labels Prometheus adds to every sample it scrapes through a PodMonitor or ServiceMonitor.
TARGET_LABELS = {"namespace", "pod", "container", "instance", "job", "endpoint", "service"}
# What the dashboard exists to show.
REQUIRED_METRICS = {
    "nv_inference_request_success",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_infer_duration_us",
    "triton_operator_models",
    "triton_operator_reconciles_total",
    "triton_operator_control_calls_total",
    "triton_operator_rollouts_total",
}
# How prometheus_client exports each metric type.
SAMPLE_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}

BATCHED = {
    "backend": "python",
    "maxBatchSize": 4,
    "dynamicBatching": {},
    "input": [{"name": "IN", "dataType": "TYPE_FP32", "dims": [2]}],
    "output": [{"name": "OUT", "dataType": "TYPE_FP32", "dims": [2]}],
    "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
}


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD_FILE.read_text())


def queries() -> list[tuple[str, str]]:
    """(query, legend) of every panel target and every templating variable."""
    targets = [
        (t["expr"], t.get("legendFormat", "")) for panel in dashboard()["panels"] for t in panel.get("targets", [])
    ]
    variables = [(v["query"]["query"], "") for v in dashboard()["templating"]["list"] if v["type"] == "query"]
    return targets + variables


def selectors(query: str) -> list[tuple[str, set[str]]]:
    """Each metric a PromQL query selects, with the label names its matchers use."""
    found = []
    for match in re.finditer(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?", query):
        name, matchers = match.group(1), match.group(2) or ""
        if name.startswith(("nv_", "triton_operator_")) or matchers:
            found.append((name, set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))))
    return found


def grouping_labels(query: str) -> set[str]:
    """Labels named by `by (...)` and `label_values(metric, label)`."""
    labels = {label.strip() for group in re.findall(r"\bby\s*\(([^)]*)\)", query) for label in group.split(",")}
    return labels | set(re.findall(r"label_values\([^,]*,\s*(\w+)\)", query))


def operator_metrics() -> dict[str, set[str]]:
    """Sample names the operator exports, to their label names (histogram buckets add `le`)."""
    exported: dict[str, set[str]] = {}
    for collector in REGISTRY._collector_to_names:  # the registry's collectors: the metrics of metrics.py
        for family in collector.describe():
            for suffix in SAMPLE_SUFFIXES[family.type]:
                exported[family.name + suffix] = set(collector._labelnames) | ({"le"} if suffix == "_bucket" else set())
    return exported


@pytest.fixture(scope="module")
def triton_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, set[str]]]:
    """Sample names a real tritonserver exports with a model loaded and used, to their label names."""
    ports = Ports(*free_ports(3))
    with LocalTriton(
        TritonServerSpec.model_validate({"exitTimeoutSeconds": 5}), tmp_path_factory.mktemp("metrics"), ports
    ) as triton:
        load(triton, python_model("double", BATCHED, DOUBLING_CODE))
        client = httpclient.InferenceServerClient(f"127.0.0.1:{ports.http}")
        try:
            request = httpclient.InferInput("IN", [1, 2], "FP32")
            request.set_data_from_numpy(np.ones((1, 2), dtype=np.float32))
            assert client.infer("double", [request]).as_numpy("OUT").tolist() == [[2.0, 2.0]]
        finally:
            client.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{ports.metrics}/metrics", timeout=10) as response:
            text = response.read().decode()
    # Read as Prometheus stores it (prometheus_client's parser would rename counters to *_total).
    exported: dict[str, set[str]] = {}
    values: dict[str, set[str]] = {}
    for line in text.splitlines():
        sample = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ", line)
        if sample:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', sample.group(2) or ""))
            exported.setdefault(sample.group(1), set()).update(labels)
            values.setdefault(sample.group(1), set()).update(labels.values())
    assert "double" in values.get("nv_inference_count", set()), text[:3000]
    yield exported


def test_the_dashboard_shows_what_it_is_for() -> None:
    board = dashboard()
    assert board["uid"] and board["title"] and board["panels"]
    queried = {name for query, _ in queries() for name, _ in selectors(query)}
    assert queried >= REQUIRED_METRICS
    batch_size = [query for query, _ in queries() if "nv_inference_exec_count" in query]
    assert any(
        query.index("nv_inference_count") < query.index("/") < query.index("nv_inference_exec_count")
        for query in batch_size
    )


@pytest.mark.triton
def test_every_metric_and_label_the_dashboard_queries_exists(triton_metrics: dict[str, set[str]]) -> None:
    known = {**triton_metrics, **operator_metrics()}
    assert set(REQUIRED_METRICS) <= set(known)
    for query, legend in queries():
        metrics = selectors(query)
        assert metrics, query
        for name, matched_labels in metrics:
            assert name in known, f"{name} is neither a Triton nor an operator metric: {query}"
            assert matched_labels <= known[name] | TARGET_LABELS, (name, matched_labels, query)
        grouped = grouping_labels(query)
        for name, _ in metrics:
            assert grouped <= known[name] | TARGET_LABELS, (name, grouped - known[name], query)
        assert set(re.findall(r"\{\{(\w+)\}\}", legend)) <= grouped, (legend, query)


def test_the_chart_ships_the_dashboard_to_grafanas_sidecar() -> None:
    [config_map] = [obj for obj in render("--set", "dashboard.enabled=true") if obj["kind"] == "ConfigMap"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["triton-operator.json"]) == dashboard()
