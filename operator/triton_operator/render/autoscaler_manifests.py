"""A TritonServer's autoscaler: an autoscaling/v2 HorizontalPodAutoscaler on a Pods metric that
prometheus-adapter serves, or a KEDA ScaledObject with a Prometheus trigger.

Both scale the TritonServer itself, through its scale subresource (spec.replicas), and the operator
carries spec.replicas to the Deployment: it never writes a replica count over the autoscaler's. Both
scale on one of Triton's own metrics, averaged over the server's pods: the queue time per request (the
formula Triton's own k8s-onprem chart scales on) or the requests pending in a pod.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..api.autoscaling_spec import Autoscaling, AutoscalingTarget
from ..api.findings import Finding
from ..api.parse import DEFAULT_NAMESPACE, object_id
from ..api.resources import TritonServer
from ..api.types import API_VERSION
from ..protocol.desired import DesiredModel
from .manifests import server_child_meta, server_labels

QUEUE_TIME = "queueMicrosecondsPerRequest"
PENDING_REQUESTS = "pendingRequestsPerPod"
KEDA_API_VERSION = "keda.sh/v1alpha1"

# One series per model, version and pod; `{pods}` stands for the label matchers of the pods.
QUEUE_TIME_PER_SERIES = (
    "delta(nv_inference_queue_duration_us{{{pods}}}[30s]) / (1 + delta(nv_inference_request_success{{{pods}}}[30s]))"
)
PENDING_REQUESTS_PER_SERIES = "nv_inference_pending_request_count{{{pods}}}"

# The custom metrics prometheus-adapter serves per pod, by the rules the chart ships
# (charts/triton-operator/autoscaling/prometheus-adapter-values.yaml; tests hold them to these queries).
ADAPTER_METRICS = {QUEUE_TIME: "triton_queue_microseconds_per_request", PENDING_REQUESTS: "triton_pending_requests"}
ADAPTER_QUERIES = {
    QUEUE_TIME: f"avg({QUEUE_TIME_PER_SERIES.format(pods='<<.LabelMatchers>>')}) by (<<.GroupBy>>)",
    PENDING_REQUESTS: f"sum({PENDING_REQUESTS_PER_SERIES.format(pods='<<.LabelMatchers>>')}) by (<<.GroupBy>>)",
}


def target_metric(target: AutoscalingTarget) -> tuple[str, int]:
    """The metric the target is set on, and its value per pod."""
    if target.pending_requests_per_pod is not None:
        return PENDING_REQUESTS, target.pending_requests_per_pod
    assert target.queue_microseconds_per_request is not None  # the API holds exactly one
    return QUEUE_TIME, target.queue_microseconds_per_request


def pod_selector(server: TritonServer) -> str:
    """The pods' label selector in the API's string form, as the scale subresource reports it: an HPA
    reads its Pods metrics from the pods it selects."""
    return ",".join(f"{key}={value}" for key, value in sorted(server_labels(server).items()))


def scaling_hpa_name(server: TritonServer) -> str | None:
    """The HorizontalPodAutoscaler that scales the server: the operator's own, or the one KEDA makes for
    a ScaledObject (KEDA's documented default name, keda-hpa-<ScaledObject>)."""
    autoscaling = server.spec.autoscaling
    if autoscaling is None:
        return None
    return f"keda-hpa-{server.name}" if autoscaling.engine == "keda" else server.name


def autoscaler_objects(server: TritonServer) -> list[dict[str, Any]]:
    """The server's autoscaler, if its spec asks for one."""
    autoscaling = server.spec.autoscaling
    if autoscaling is None:
        return []
    if autoscaling.engine == "keda":
        return [scaled_object(server, autoscaling)]
    return [horizontal_pod_autoscaler(server, autoscaling)]


def _scale_target(server: TritonServer) -> dict[str, str]:
    return {"apiVersion": API_VERSION, "kind": "TritonServer", "name": server.name}


def _behavior(autoscaling: Autoscaling) -> dict[str, Any]:
    """Up at once, down only to the highest recommendation of the last five minutes (the defaults)."""
    return {
        "scaleUp": {"stabilizationWindowSeconds": autoscaling.scale_up_stabilization_seconds},
        "scaleDown": {"stabilizationWindowSeconds": autoscaling.scale_down_stabilization_seconds},
    }


def horizontal_pod_autoscaler(server: TritonServer, autoscaling: Autoscaling) -> dict[str, Any]:
    """A Pods metric: the HPA averages each pod's value, as prometheus-adapter serves it, over the pods
    the scale subresource selects."""
    metric, value = target_metric(autoscaling.target)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": server_child_meta(server),
        "spec": {
            "scaleTargetRef": _scale_target(server),
            "minReplicas": autoscaling.min_replicas,
            "maxReplicas": autoscaling.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": ADAPTER_METRICS[metric]},
                        "target": {"type": "AverageValue", "averageValue": str(value)},
                    },
                }
            ],
            "behavior": _behavior(autoscaling),
        },
    }


def keda_query(server: TritonServer, metric: str) -> str:
    """The metric averaged over the server's pods, which a Deployment names <server>-<hash>-<suffix>: any
    Prometheus has the pod's name and namespace, not every one has its labels."""
    namespace = server.metadata.namespace or DEFAULT_NAMESPACE
    pods = f'namespace="{namespace}",pod=~"{server.name.replace(".", "[.]")}-[a-z0-9]+-[a-z0-9]+"'
    if metric == PENDING_REQUESTS:
        return f"avg(sum by (pod) ({PENDING_REQUESTS_PER_SERIES.format(pods=pods)}))"
    return f"avg({QUEUE_TIME_PER_SERIES.format(pods=pods)})"


def scaled_object(server: TritonServer, autoscaling: Autoscaling) -> dict[str, Any]:
    """A Prometheus trigger of metric type Value: the query is already the average over the pods, which
    the HPA KEDA makes holds at the threshold (KEDA's default, AverageValue, would divide it by the pods)."""
    assert autoscaling.keda is not None  # the API requires it with engine: keda
    metric, value = target_metric(autoscaling.target)
    trigger = {
        "type": "prometheus",
        "metricType": "Value",
        "metadata": {
            "serverAddress": autoscaling.keda.server_address,
            "query": keda_query(server, metric),
            "threshold": str(value),
        },
    }
    return {
        "apiVersion": KEDA_API_VERSION,
        "kind": "ScaledObject",
        "metadata": server_child_meta(server),
        "spec": {
            "scaleTargetRef": _scale_target(server),
            "minReplicaCount": autoscaling.min_replicas,
            "maxReplicaCount": autoscaling.max_replicas,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(autoscaling)}},
            "triggers": [trigger],
        },
    }


def batching_delay_findings(server: TritonServer, models: Iterable[DesiredModel]) -> list[Finding]:
    """Triton counts the time a dynamic batcher holds a request as queue time, and a quiet batcher holds
    each request its whole delay: a queue-time target below that delay scales out when traffic is low.
    The models' configs are parsed only on a server with such a target (a check on every pass)."""
    autoscaling = server.spec.autoscaling
    if autoscaling is None or autoscaling.target.queue_microseconds_per_request is None:
        return []
    target = autoscaling.target.queue_microseconds_per_request
    delays = {
        config.name: config.dynamic_batching.max_queue_delay_microseconds
        for config in (model.parsed_config() for model in models)
        if config.HasField("dynamic_batching") and config.dynamic_batching.max_queue_delay_microseconds >= target
    }
    if not delays:
        return []
    longest = max(delays.values())
    held = ", ".join(f"'{name}' {delay}" for name, delay in sorted(delays.items()))
    return [
        Finding(
            "warning",
            "spec.autoscaling.target.queueMicrosecondsPerRequest",
            f"is {target}, but dynamic batchers hold requests up to maxQueueDelayMicroseconds ({held}), which Triton "
            "counts as queue time: the server would scale out on the batchers' own wait when traffic is low; "
            f"set the target above {longest}, or scale on pendingRequestsPerPod",
            obj=object_id("TritonServer", server.metadata),
        )
    ]
