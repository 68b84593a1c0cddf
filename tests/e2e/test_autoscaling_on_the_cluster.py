"""Autoscaling on the real control plane: the HorizontalPodAutoscaler the operator renders for a
TritonServer's `spec.autoscaling` is run by the real controller-manager, which reads Triton's queue
time per pod from a custom metrics APIService (tests/support/controlplane/custom_metrics.py, in
place of Prometheus and prometheus-adapter) and scales the TritonServer through its scale
subresource; the operator carries that to the Deployment, and the new pod serves the model.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.support.controlplane import custom_metrics
from tests.support.e2e import E2E_MARKS, NEEDS_NODES, current, kubectl
from tests.support.models import ADD_CONFIG, add_code
from tests.support.resources import python_model_documents
from tests.support.serving import RequestLoop

pytestmark = [*E2E_MARKS, NEEDS_NODES, pytest.mark.triton, pytest.mark.slow]
NAMESPACE = "autoscaling"
TARGET_US = 20_000  # queue time per request the HPA holds each pod at; a busy slow model queues far more
SENDERS = 6  # concurrent clients of a model that takes 100 ms per execution, one instance, one request each
# Without a dynamic batcher each request is an execution of its own: requests wait in Triton's queue.
SLOW_CONFIG = {key: value for key, value in ADD_CONFIG.items() if key != "dynamicBatching"}
SLOW_CODE = add_code(execute="time.sleep(0.1)")
SERVER = {
    "apiVersion": "triton-operator.io/v1alpha1",
    "kind": "TritonServer",
    "metadata": {"name": "triton"},
    "spec": {
        "backends": ["python"],
        "exitTimeoutSeconds": 5,
        "autoscaling": {"minReplicas": 1, "maxReplicas": 2, "target": {"queueMicrosecondsPerRequest": TARGET_US}},
    },
}


def _object(kind: str, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
    return json.loads(kubectl("get", kind, name, "-n", namespace, "-o", "json").stdout)  # type: ignore[no-any-return]


def _until(what: str, done: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := done():
            return found
        time.sleep(1)  # a poll of the API server, bounded by `timeout`
    seen = kubectl("get", "hpa,pods,tritonmodels,tritonservers", "-n", NAMESPACE, "-o", "yaml").stdout
    pytest.fail(f"not within {timeout:.0f} s: {what}\n{seen}")


def _replicas(kind: str) -> int:
    return int(_object(kind, "triton")["spec"]["replicas"])


def _served() -> str:
    return str(_object("tritonmodel", "slow").get("status", {}).get("replicas"))


def _in_service() -> bool:
    """Whether the Service's EndpointSlices name a ready pod (the proxy closes connections until one does)."""
    selector = "kubernetes.io/service-name=triton"
    slices = json.loads(kubectl("get", "endpointslices", "-n", NAMESPACE, "-l", selector, "-o", "json").stdout)["items"]
    return any((e.get("conditions") or {}).get("ready") for s in slices for e in s.get("endpoints") or [])


@pytest.fixture
def metrics_api(operator_installed: None) -> Iterator[custom_metrics.CustomMetrics]:
    plane = current().plane
    if plane is None:
        pytest.skip("NOT RUN: the custom metrics stand-in registers itself on the control plane built here only")
    with custom_metrics.serving(plane) as (metrics, registration):
        kubectl("apply", "-f", "-", input=yaml.safe_dump_all(registration))
        try:
            kubectl("wait", "--for=condition=Available", f"apiservice/{registration[-1]['metadata']['name']}",
                    "--timeout=120s", timeout=150)  # fmt: skip
            yield metrics
        finally:
            kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=false", input=yaml.safe_dump_all(registration))


def test_the_hpa_scales_a_busy_server_on_tritons_queue_time(metrics_api: custom_metrics.CustomMetrics) -> None:
    kubectl("create", "namespace", NAMESPACE)
    try:
        documents = [SERVER, *python_model_documents("slow", SLOW_CONFIG, SLOW_CODE)]
        kubectl("apply", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump_all(documents))
        _until("the model Ready", lambda: _served() == "1/1", timeout=300)
        hpa = _object("hpa", "triton")
        assert hpa["spec"]["scaleTargetRef"] == {
            "apiVersion": "triton-operator.io/v1alpha1", "kind": "TritonServer", "name": "triton",
        }  # fmt: skip
        assert _replicas("tritonserver") == 1  # the HPA's minReplicas, through the scale subresource
        # In the Service once its container's readiness probe passes too, a moment after the model's status.
        _until("the pod in the Service", _in_service, timeout=120)
        address = _object("service", "triton")["spec"]["clusterIP"]
        started = time.monotonic()
        with RequestLoop([f"{address}:8001"] * SENDERS, model="slow", kept=True) as senders:
            _until("the HPA scaling the server to 2", lambda: _replicas("tritonserver") == 2, timeout=240)
            scaled = time.monotonic() - started
            _until("the model served on both pods", lambda: _served() == "2/2", timeout=300)
            served = time.monotonic() - started
        assert _replicas("deployment") == 2
        current_metrics = _object("hpa", "triton")["status"].get("currentMetrics") or []
        [queue_time] = [m["pods"]["current"]["averageValue"] for m in current_metrics if m["type"] == "Pods"]
        selector = _object("tritonserver", "triton")["status"]["selector"]
        asked = [a for a in metrics_api.asked if a["namespace"] == NAMESPACE]
        assert asked and all(a["labelSelector"] == selector for a in asked), asked[-3:]
        print(f"scaled to 2 {scaled:.0f} s after load began (queue time per request then {queue_time} µs against "
              f"{TARGET_US}); the new pod served {served:.0f} s after; {senders.sent} answered")  # fmt: skip
        assert senders.failures == [], senders.failures[:5]
    finally:
        kubectl("delete", "namespace", NAMESPACE, "--timeout=300s", check=False, timeout=330)
