"""Autoscaling: the HorizontalPodAutoscaler and the KEDA ScaledObject rendered from spec.autoscaling,
each checked against its own schema (Kubernetes 1.30 strict; KEDA's documented fields); the status
read from the HPA that scales the server; and the operator at work on the emulated API server:
the scale subresource reaching the Deployment, autoscalers made, switched and deleted."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest

from tests.conftest import ROOT
from tests.support.crd_check import crd_errors
from tests.support.operator import Cluster, api_server, assert_valid_objects, running_operator
from tests.support.resources import BASE_CONFIG, SERVER, model_document
from triton_operator.api.autoscaling_spec import Autoscaling, AutoscalingTarget, Keda
from triton_operator.api.parse import parse_resources
from triton_operator.api.resources import TritonServer
from triton_operator.k8s.server.autoscaler_upkeep import autoscaling_status
from triton_operator.render import autoscaler_manifests as autoscaling
from triton_operator.render.fleet import plan_fleet, server_objects
from triton_operator.render.schema import check_manifests

KEDA_SCHEMA = json.loads((ROOT / "tests/data/keda/scaledobject-v1alpha1.json").read_text())
PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"


def server_document(name: str = "triton", **autoscaling_fields: Any) -> dict[str, Any]:
    metadata = {"name": name, "namespace": "ml", "uid": "u-1"}
    return {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonServer",
        "metadata": metadata,
        "spec": {"autoscaling": autoscaling_fields},
    }


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
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonServer",
        "name": "triton",
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 4)
    assert hpa["spec"]["metrics"] == [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": "triton_queue_microseconds_per_request"},
                "target": {"type": "AverageValue", "averageValue": "50"},
            },
        }
    ]
    assert hpa["spec"]["behavior"] == {
        "scaleUp": {"stabilizationWindowSeconds": 0},
        "scaleDown": {"stabilizationWindowSeconds": 300},
    }


def test_pending_requests_and_the_windows_are_the_users() -> None:
    hpa = objects_of(
        server_document(
            minReplicas=2,
            maxReplicas=9,
            target={"pendingRequestsPerPod": 8},
            scaleUpStabilizationSeconds=30,
            scaleDownStabilizationSeconds=900,
        )
    )["HorizontalPodAutoscaler"]
    assert check_manifests([hpa]) == []
    assert hpa["spec"]["metrics"][0]["pods"] == {
        "metric": {"name": "triton_pending_requests"},
        "target": {"type": "AverageValue", "averageValue": "8"},
    }
    assert hpa["spec"]["behavior"] == {
        "scaleUp": {"stabilizationWindowSeconds": 30},
        "scaleDown": {"stabilizationWindowSeconds": 900},
    }


def test_an_invalid_hpa_would_be_caught_by_the_kubernetes_schema() -> None:
    """The check above can fail: the same HPA with a field Kubernetes does not have is refused."""
    hpa = objects_of(server_document(maxReplicas=4))["HorizontalPodAutoscaler"]
    hpa["spec"]["behavior"]["scaleDown"]["stabilisationWindowSeconds"] = 1
    assert [f.path for f in check_manifests([hpa])] == ["spec.behavior.scaleDown"]


@pytest.mark.parametrize("target", [{}, {"target": {"pendingRequestsPerPod": 3}}], ids=["queue-time", "pending"])
def test_a_scaled_object_has_only_the_fields_kedas_documentation_lists(target: dict[str, Any]) -> None:
    objects = objects_of(
        server_document(engine="keda", minReplicas=2, maxReplicas=6, keda={"serverAddress": PROMETHEUS}, **target)
    )
    assert "HorizontalPodAutoscaler" not in objects
    scaled = objects["ScaledObject"]
    jsonschema.Draft202012Validator(KEDA_SCHEMA).validate(scaled)
    spec = scaled["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonServer",
        "name": "triton",
    }
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 6)
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"] == {
        "stabilizationWindowSeconds": 300
    }
    [trigger] = spec["triggers"]
    assert trigger["metricType"] == "Value" and trigger["metadata"]["serverAddress"] == PROMETHEUS
    assert trigger["metadata"]["threshold"] == ("3" if target else "50")


def test_the_keda_schema_refuses_what_keda_does_not_document() -> None:
    scaled = objects_of(server_document(engine="keda", maxReplicas=6, keda={"serverAddress": PROMETHEUS}))[
        "ScaledObject"
    ]
    scaled["spec"]["triggers"][0]["metadata"]["metricName"] = "queue"  # KEDA 1.x's field
    with pytest.raises(jsonschema.ValidationError, match="metricName"):
        jsonschema.Draft202012Validator(KEDA_SCHEMA).validate(scaled)


def test_kedas_queries_average_tritons_metrics_over_the_servers_pods_only() -> None:
    queue = autoscaling.keda_query(
        TritonServer.model_validate(server_document("big.one", maxReplicas=2)), autoscaling.QUEUE_TIME
    )
    pods = 'namespace="ml",pod=~"big[.]one-[a-z0-9]+-[a-z0-9]+"'
    assert queue == (
        f"avg(delta(nv_inference_queue_duration_us{{{pods}}}[30s]) / (1 + "
        f"delta(nv_inference_request_success{{{pods}}}[30s])))"
    )
    pending = autoscaling.keda_query(
        TritonServer.model_validate(server_document("big.one", maxReplicas=2)), autoscaling.PENDING_REQUESTS
    )
    assert pending == f"avg(sum by (pod) (nv_inference_pending_request_count{{{pods}}}))"


def test_the_hpa_that_scales_a_keda_server_is_the_one_keda_names_by_default() -> None:
    keda = TritonServer.model_validate(
        server_document(engine="keda", maxReplicas=2, keda={"serverAddress": PROMETHEUS})
    )
    assert autoscaling.scaling_hpa_name(keda) == KEDA_SCHEMA["x-keda-hpa-name"].replace(
        "{scaled-object-name}", "triton"
    )
    assert autoscaling.scaling_hpa_name(TritonServer.model_validate(server_document(maxReplicas=2))) == "triton"


def test_the_pod_selector_is_the_deployments() -> None:
    objects = objects_of(server_document(maxReplicas=2))
    labels = objects["Deployment"]["spec"]["selector"]["matchLabels"]
    selector = autoscaling.pod_selector(TritonServer.model_validate(server_document(maxReplicas=2)))
    assert dict(term.split("=") for term in selector.split(",")) == labels
    assert selector == ",".join(
        sorted(selector.split(","))
    )  # one spelling: the status does not change from pass to pass


def test_without_autoscaling_there_is_no_autoscaler() -> None:
    document = server_document()
    del document["spec"]["autoscaling"]
    assert set(objects_of(document)) == {"Secret", "Deployment", "Service", "NetworkPolicy"}


def test_a_queue_time_target_below_a_batchers_delay_is_warned_about() -> None:
    batched = {**BASE_CONFIG, "dynamicBatching": {"maxQueueDelayMicroseconds": 5000}}
    documents = [
        server_document(maxReplicas=4),
        model_document(batched) | {"metadata": {"name": "m", "namespace": "ml"}},
    ]
    documents[0]["spec"]["backends"] = ["onnxruntime"]
    documents[0]["spec"]["modelRepository"] = {"pvc": {"claimName": "models"}}  # where the model's files are
    servers, models, _ = parse_resources(documents)
    [warning] = plan_fleet(servers, models).findings
    assert warning.where == "TritonServer/ml/triton: spec.autoscaling.target.queueMicrosecondsPerRequest"
    assert (
        "'m' 5000" in warning.message
        and "set the target above 5000, or scale on pendingRequestsPerPod" in warning.message
    )
    documents[0]["spec"]["autoscaling"]["target"] = {"queueMicrosecondsPerRequest": 6000}
    assert plan_fleet(*parse_resources(documents)[:2]).findings == []
    documents[0]["spec"]["autoscaling"]["target"] = {"pendingRequestsPerPod": 4}
    assert plan_fleet(*parse_resources(documents)[:2]).findings == []


def test_rendering_is_the_same_every_time() -> None:
    document = server_document(engine="keda", maxReplicas=6, keda={"serverAddress": PROMETHEUS})
    assert objects_of(document) == objects_of(document)


def test_the_autoscaling_page_lists_every_autoscaling_field() -> None:
    rows = [
        line.split("`")[1]
        for line in (ROOT / "docs/autoscaling.md").read_text().splitlines()
        if line.startswith("| `spec.autoscaling.")
    ]
    fields = [
        f"spec.autoscaling.{prefix}{info.alias}"
        for prefix, model in (("", Autoscaling), ("target.", AutoscalingTarget), ("keda.", Keda))
        for info in model.model_fields.values()
        if info.alias not in ("target", "keda")
    ]
    assert sorted(rows) == sorted(fields)


def test_a_valid_autoscaling_spec_passes_the_crd() -> None:
    keda = server_document(
        engine="keda",
        minReplicas=2,
        maxReplicas=6,
        target={"pendingRequestsPerPod": 3},
        keda={"serverAddress": PROMETHEUS},
    )
    assert crd_errors(keda) == [] and crd_errors(server_document(maxReplicas=1)) == []


# -- the status, from the HPA that scales the server ----------------------------------------------


def test_the_status_reads_the_hpas_current_value_and_why_it_cannot_scale() -> None:
    server = TritonServer.model_validate(server_document(maxReplicas=4))
    hpa = {
        "status": {
            "currentMetrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": "triton_queue_microseconds_per_request"},
                        "current": {"averageValue": "12500m"},
                    },
                }
            ],
            "conditions": [
                {"type": "AbleToScale", "status": "True"},
                {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound"},
            ],
        }
    }
    status = autoscaling_status(server, hpa)
    assert (status.engine, status.autoscaler, status.metric, status.target, status.current, status.message) == (
        "hpa",
        "HorizontalPodAutoscaler/triton",
        "queueMicrosecondsPerRequest",
        50,
        12.5,
        "",
    )
    hpa["status"]["conditions"][1] = {
        "type": "ScalingActive",
        "status": "False",
        "reason": "FailedGetPodsMetric",
        "message": "unable to get metric triton_queue_microseconds_per_request",
    }
    assert (
        autoscaling_status(server, hpa).message
        == "FailedGetPodsMetric: unable to get metric triton_queue_microseconds_per_request"
    )
    assert autoscaling_status(server, {}).current is None  # not read yet
    keda = TritonServer.model_validate(
        server_document(engine="keda", maxReplicas=4, keda={"serverAddress": PROMETHEUS})
    )
    assert "KEDA has not made HorizontalPodAutoscaler keda-hpa-triton" in autoscaling_status(keda, None).message
    external = {
        "status": {
            "currentMetrics": [
                {"type": "External", "external": {"metric": {"name": "s0-prometheus"}, "current": {"value": "80"}}}
            ]
        }
    }
    assert autoscaling_status(keda, external).current == 80.0


# -- the operator on the emulated API server --------------------------------------------------------


def hpa_status(current: str, scaling: dict[str, str]) -> dict[str, Any]:
    """What the HPA controller writes into an HPA's status."""
    metric = {
        "type": "Pods",
        "pods": {"metric": {"name": "triton_queue_microseconds_per_request"}, "current": {"averageValue": current}},
    }
    return {
        "status": {
            "currentReplicas": 2,
            "desiredReplicas": 2,
            "currentMetrics": [metric],
            "conditions": [{"type": "ScalingActive", **scaling}],
        }
    }


def autoscaling_of(cluster: Cluster) -> dict[str, Any] | None:
    return (cluster.get("TritonServer", "triton").get("status") or {}).get("autoscaling")


async def test_a_scale_through_the_subresource_reaches_the_deployment() -> None:
    """`kubectl scale` patches the TritonServer's scale, an HPA or KEDA puts it: the operator carries
    spec.replicas to the Deployment, and the Scale reports what it applied and the pods' selector."""
    async with api_server() as cluster, running_operator(cluster):
        await cluster.create(copy.deepcopy(SERVER))
        await cluster.wait(
            "the Deployment", lambda: (cluster.get("Deployment", "triton") or {}).get("spec", {}).get("replicas") == 2
        )
        scale = await cluster.wait_async("the Scale with the selector", lambda: _scale_with_selector(cluster))
        deployment = cluster.get("Deployment", "triton")
        assert scale["spec"] == {"replicas": 2} and scale["status"]["replicas"] == 2
        assert (
            dict(term.split("=") for term in scale["status"]["selector"].split(","))
            == deployment["spec"]["selector"]["matchLabels"]
        )
        generation = cluster.get("TritonServer", "triton")["metadata"]["generation"]

        scaled = await cluster.scale("TritonServer", "triton", 4)  # kubectl scale tritonserver triton --replicas=4
        assert scaled["kind"] == "Scale" and scaled["spec"] == {"replicas": 4}
        await cluster.wait(
            "the Deployment scaled by kubectl", lambda: cluster.get("Deployment", "triton")["spec"]["replicas"] == 4
        )
        assert cluster.get("TritonServer", "triton")["metadata"]["generation"] == generation + 1
        await cluster.scale("TritonServer", "triton", 5, method="PUT")  # as the HPA controller and KEDA write it
        await cluster.wait(
            "the Deployment scaled by an autoscaler",
            lambda: cluster.get("Deployment", "triton")["spec"]["replicas"] == 5,
        )
        await cluster.wait_async("the Scale's status", lambda: _scale_replicas(cluster, 5))
        assert (
            cluster.get("TritonServer", "triton")["spec"]["replicas"] == 5
        )  # as the autoscaler wrote it: the operator never writes spec
        assert_valid_objects(cluster)


async def _scale_with_selector(cluster: Cluster) -> dict[str, Any] | None:
    scale = await cluster.scale("TritonServer", "triton")
    return scale if scale["status"]["selector"] else None


async def _scale_replicas(cluster: Cluster, replicas: int) -> bool:
    return (await cluster.scale("TritonServer", "triton"))["status"]["replicas"] == replicas


async def test_the_autoscaler_follows_the_spec_and_the_status_follows_the_autoscaler() -> None:
    async with api_server() as cluster, running_operator(cluster, resync_seconds=1):
        await cluster.create({**copy.deepcopy(SERVER), "spec": {**SERVER["spec"], "autoscaling": {"maxReplicas": 4}}})
        hpa = await cluster.wait("the HPA", lambda: cluster.get("HorizontalPodAutoscaler", "triton"))
        assert hpa["spec"]["scaleTargetRef"]["kind"] == "TritonServer" and hpa["spec"]["maxReplicas"] == 4
        assert await cluster.wait("the autoscaling status", lambda: autoscaling_of(cluster)) == {
            "engine": "hpa",
            "autoscaler": "HorizontalPodAutoscaler/triton",
            "metric": "queueMicrosecondsPerRequest",
            "target": 50,
            "message": "",
        }

        # The HPA controller reads the metric, or fails to: the status says what it says, at the next pass.
        await cluster.patch(
            "HorizontalPodAutoscaler",
            "triton",
            hpa_status("41", {"status": "True", "reason": "ValidMetricFound"}),
            subresource="status",
        )
        await cluster.wait("the current value", lambda: (autoscaling_of(cluster) or {}).get("current") == 41)
        missing = {
            "status": "False",
            "reason": "FailedGetPodsMetric",
            "message": "no metrics returned from custom metrics API",
        }
        await cluster.patch("HorizontalPodAutoscaler", "triton", hpa_status("41", missing), subresource="status")
        await cluster.wait(
            "why it cannot scale",
            lambda: (
                (autoscaling_of(cluster) or {}).get("message")
                == "FailedGetPodsMetric: no metrics returned from custom metrics API"
            ),
        )

        # Another engine: the operator's HPA goes, the ScaledObject comes; the status reads the HPA KEDA makes.
        keda = {"engine": "keda", "maxReplicas": 4, "keda": {"serverAddress": PROMETHEUS}}
        await cluster.patch("TritonServer", "triton", {"spec": {"autoscaling": keda}})
        scaled = await cluster.wait("the ScaledObject", lambda: cluster.get("ScaledObject", "triton"))
        jsonschema.Draft202012Validator(KEDA_SCHEMA).validate(scaled)
        await cluster.wait(
            "the operator's HPA deleted", lambda: cluster.get("HorizontalPodAutoscaler", "triton") is None
        )
        await cluster.wait(
            "KEDA awaited", lambda: "KEDA has not made" in (autoscaling_of(cluster) or {}).get("message", "")
        )
        made_by_keda = {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "keda-hpa-triton"},
            "spec": hpa["spec"],
        }
        await cluster.create(made_by_keda)
        external = {"type": "External", "external": {"metric": {"name": "s0-prometheus"}, "current": {"value": "80"}}}
        await cluster.patch(
            "HorizontalPodAutoscaler",
            "keda-hpa-triton",
            {"status": {"desiredReplicas": 2, "currentMetrics": [external]}},
            subresource="status",
        )
        status = await cluster.wait(
            "KEDA's HPA read", lambda: (s := autoscaling_of(cluster) or {}).get("current") == 80 and s
        )
        assert (
            status["engine"] == "keda"
            and status["autoscaler"] == "HorizontalPodAutoscaler/keda-hpa-triton"
            and status["message"] == ""
        )
        assert_valid_objects(cluster)

        # No autoscaling: the ScaledObject goes (KEDA's HPA with it, by its owner reference), and the status says none.
        await cluster.patch("TritonServer", "triton", {"spec": {"autoscaling": None}})
        await cluster.wait("the ScaledObject deleted", lambda: cluster.get("ScaledObject", "triton") is None)
        await cluster.wait("no autoscaling status", lambda: autoscaling_of(cluster) is None)


async def test_an_autoscaler_removed_from_the_spec_while_the_operator_was_down_is_deleted() -> None:
    """What the operator made is in the server's status, so a new operator knows it without a listing."""
    async with api_server() as cluster:
        async with running_operator(cluster):
            await cluster.create(
                {**copy.deepcopy(SERVER), "spec": {**SERVER["spec"], "autoscaling": {"maxReplicas": 4}}}
            )
            await cluster.wait("the autoscaling status", lambda: autoscaling_of(cluster))
        await cluster.patch("TritonServer", "triton", {"spec": {"autoscaling": None}})
        assert cluster.get("HorizontalPodAutoscaler", "triton") is not None
        async with running_operator(cluster):
            await cluster.wait("the HPA deleted", lambda: cluster.get("HorizontalPodAutoscaler", "triton") is None)
            await cluster.wait("no autoscaling status", lambda: autoscaling_of(cluster) is None)


async def test_an_autoscaler_deleted_and_asked_for_again_is_made_again_at_once() -> None:
    """Not at the next resync (a minute): the operator forgets it applied what it deleted."""
    async with api_server() as cluster, running_operator(cluster, resync_seconds=60):
        await cluster.create({**copy.deepcopy(SERVER), "spec": {**SERVER["spec"], "autoscaling": {"maxReplicas": 4}}})
        await cluster.wait("the HPA", lambda: cluster.get("HorizontalPodAutoscaler", "triton"))
        await cluster.patch("TritonServer", "triton", {"spec": {"autoscaling": None}})
        await cluster.wait("the HPA deleted", lambda: cluster.get("HorizontalPodAutoscaler", "triton") is None)
        await cluster.patch("TritonServer", "triton", {"spec": {"autoscaling": {"maxReplicas": 4}}})
        await cluster.wait("the HPA again", lambda: cluster.get("HorizontalPodAutoscaler", "triton"), timeout=10)
