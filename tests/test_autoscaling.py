"""Autoscaling: the HorizontalPodAutoscaler and the KEDA ScaledObject rendered from spec.autoscaling,
each checked against its own schema (Kubernetes 1.30 strict; KEDA's documented fields), and what
the API and the CRD refuse."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from tests.conftest import ROOT
from tests.support.crd_check import crd_errors
from tests.support.resources import BASE_CONFIG, model_document
from triton_operator.api.parse import parse_resources
from triton_operator.api.resources import TritonServer
from triton_operator.render import autoscaling
from triton_operator.render.fleet import plan_fleet, server_objects
from triton_operator.render.schema import check_manifests

KEDA_SCHEMA = json.loads((ROOT / "tests/data/keda/scaledobject-v1alpha1.json").read_text())
PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"


def server_document(name: str = "triton", **autoscaling_fields: Any) -> dict[str, Any]:
    metadata = {"name": name, "namespace": "ml", "uid": "u-1"}
    return {"apiVersion": "triton-operator.io/v1alpha1", "kind": "TritonServer", "metadata": metadata, "spec": {"autoscaling": autoscaling_fields}}


def objects_of(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    [server], _, found = parse_resources([document])
    assert found == []
    [rendered] = plan_fleet([server], []).servers
    return {obj["kind"]: obj for obj in server_objects(rendered, None)}


def test_the_default_is_an_hpa_on_the_queue_time_per_request_that_scales_down_slowly() -> None:
    objects = objects_of(server_document(maxReplicas=4))
    assert "ScaledObject" not in objects
    hpa = objects["HorizontalPodAutoscaler"]
    assert check_manifests([hpa]) == []
    assert hpa["metadata"]["name"] == "triton" and hpa["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "triton-operator.io/v1alpha1", "kind": "TritonServer", "name": "triton"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 4)
    assert hpa["spec"]["metrics"] == [
        {"type": "Pods", "pods": {"metric": {"name": "triton_queue_microseconds_per_request"}, "target": {"type": "AverageValue", "averageValue": "50"}}}
    ]
    assert hpa["spec"]["behavior"] == {"scaleUp": {"stabilizationWindowSeconds": 0}, "scaleDown": {"stabilizationWindowSeconds": 300}}


def test_pending_requests_and_the_windows_are_the_users() -> None:
    hpa = objects_of(server_document(minReplicas=2, maxReplicas=9, target={"pendingRequestsPerPod": 8}, scaleUpStabilizationSeconds=30, scaleDownStabilizationSeconds=900))[
        "HorizontalPodAutoscaler"
    ]
    assert check_manifests([hpa]) == []
    assert hpa["spec"]["metrics"][0]["pods"] == {"metric": {"name": "triton_pending_requests"}, "target": {"type": "AverageValue", "averageValue": "8"}}
    assert hpa["spec"]["behavior"] == {"scaleUp": {"stabilizationWindowSeconds": 30}, "scaleDown": {"stabilizationWindowSeconds": 900}}


def test_an_invalid_hpa_would_be_caught_by_the_kubernetes_schema() -> None:
    """The check above can fail: the same HPA with a field Kubernetes does not have is refused."""
    hpa = objects_of(server_document(maxReplicas=4))["HorizontalPodAutoscaler"]
    hpa["spec"]["behavior"]["scaleDown"]["stabilisationWindowSeconds"] = 1
    assert [f.path for f in check_manifests([hpa])] == ["spec.behavior.scaleDown"]


@pytest.mark.parametrize("target", [{}, {"target": {"pendingRequestsPerPod": 3}}], ids=["queue-time", "pending"])
def test_a_scaled_object_has_only_the_fields_kedas_documentation_lists(target: dict[str, Any]) -> None:
    objects = objects_of(server_document(engine="keda", minReplicas=2, maxReplicas=6, keda={"serverAddress": PROMETHEUS}, **target))
    assert "HorizontalPodAutoscaler" not in objects
    scaled = objects["ScaledObject"]
    jsonschema.Draft202012Validator(KEDA_SCHEMA).validate(scaled)
    spec = scaled["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "triton-operator.io/v1alpha1", "kind": "TritonServer", "name": "triton"}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 6)
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"] == {"stabilizationWindowSeconds": 300}
    [trigger] = spec["triggers"]
    assert trigger["metricType"] == "Value" and trigger["metadata"]["serverAddress"] == PROMETHEUS
    assert trigger["metadata"]["threshold"] == ("3" if target else "50")


def test_the_keda_schema_refuses_what_keda_does_not_document() -> None:
    scaled = objects_of(server_document(engine="keda", maxReplicas=6, keda={"serverAddress": PROMETHEUS}))["ScaledObject"]
    scaled["spec"]["triggers"][0]["metadata"]["metricName"] = "queue"  # KEDA 1.x's field
    with pytest.raises(jsonschema.ValidationError, match="metricName"):
        jsonschema.Draft202012Validator(KEDA_SCHEMA).validate(scaled)


def test_kedas_queries_average_tritons_metrics_over_the_servers_pods_only() -> None:
    queue = autoscaling.keda_query(TritonServer.model_validate(server_document("big.one", maxReplicas=2)), autoscaling.QUEUE_TIME)
    pods = 'namespace="ml",pod=~"big[.]one-[a-z0-9]+-[a-z0-9]+"'
    assert queue == f"avg(delta(nv_inference_queue_duration_us{{{pods}}}[30s]) / (1 + delta(nv_inference_request_success{{{pods}}}[30s])))"
    pending = autoscaling.keda_query(TritonServer.model_validate(server_document("big.one", maxReplicas=2)), autoscaling.PENDING_REQUESTS)
    assert pending == f"avg(sum by (pod) (nv_inference_pending_request_count{{{pods}}}))"


def test_the_hpa_that_scales_a_keda_server_is_the_one_keda_names_by_default() -> None:
    keda = TritonServer.model_validate(server_document(engine="keda", maxReplicas=2, keda={"serverAddress": PROMETHEUS}))
    assert autoscaling.scaling_hpa_name(keda) == KEDA_SCHEMA["x-keda-hpa-name"].replace("{scaled-object-name}", "triton")
    assert autoscaling.scaling_hpa_name(TritonServer.model_validate(server_document(maxReplicas=2))) == "triton"


def test_the_pod_selector_is_the_deployments() -> None:
    objects = objects_of(server_document(maxReplicas=2))
    labels = objects["Deployment"]["spec"]["selector"]["matchLabels"]
    selector = autoscaling.pod_selector(TritonServer.model_validate(server_document(maxReplicas=2)))
    assert dict(term.split("=") for term in selector.split(",")) == labels
    assert selector == ",".join(sorted(selector.split(",")))  # one spelling: the status does not change from pass to pass


def test_without_autoscaling_there_is_no_autoscaler() -> None:
    document = server_document()
    del document["spec"]["autoscaling"]
    assert set(objects_of(document)) == {"Secret", "Deployment", "Service"}


def test_a_queue_time_target_below_a_batchers_delay_is_warned_about() -> None:
    batched = {**BASE_CONFIG, "dynamicBatching": {"maxQueueDelayMicroseconds": 5000}}
    documents = [server_document(maxReplicas=4), model_document(batched) | {"metadata": {"name": "m", "namespace": "ml"}}]
    documents[0]["spec"]["backends"] = ["onnxruntime"]
    servers, models, _ = parse_resources(documents)
    [warning] = plan_fleet(servers, models).findings
    assert warning.where == "TritonServer/ml/triton: spec.autoscaling.target.queueMicrosecondsPerRequest"
    assert "'m' 5000" in warning.message and "set the target above 5000, or scale on pendingRequestsPerPod" in warning.message
    documents[0]["spec"]["autoscaling"]["target"] = {"queueMicrosecondsPerRequest": 6000}
    assert plan_fleet(*parse_resources(documents)[:2]).findings == []
    documents[0]["spec"]["autoscaling"]["target"] = {"pendingRequestsPerPod": 4}
    assert plan_fleet(*parse_resources(documents)[:2]).findings == []


def test_rendering_is_the_same_every_time() -> None:
    document = server_document(engine="keda", maxReplicas=6, keda={"serverAddress": PROMETHEUS})
    assert objects_of(document) == objects_of(document)


def test_a_valid_autoscaling_spec_passes_the_crd() -> None:
    keda = server_document(engine="keda", minReplicas=2, maxReplicas=6, target={"pendingRequestsPerPod": 3}, keda={"serverAddress": PROMETHEUS})
    assert crd_errors(keda) == [] and crd_errors(server_document(maxReplicas=1)) == []
