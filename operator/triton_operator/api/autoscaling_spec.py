"""`TritonServer.spec.autoscaling`: an autoscaler for the server's pods, on Triton's own metrics.

The autoscaler scales the TritonServer through its scale subresource (spec.replicas); the operator
carries spec.replicas to the Deployment. Rendered by render/autoscaler_manifests.py.
"""

from typing import Annotated, Literal, Self

from pydantic import Field, StringConstraints, ValidationInfo, field_validator, model_validator

from .types import ApiModel, with_cel_rules

DEFAULT_QUEUE_MICROSECONDS_PER_REQUEST = 50  # what Triton's own k8s-onprem chart scales on
STABILIZATION_LIMIT_SECONDS = 3600  # the HorizontalPodAutoscaler's bound on a stabilization window


class AutoscalingTarget(ApiModel):
    """What the autoscaler holds each pod at: one of Triton's own metrics, averaged over the server's pods."""

    model_config = with_cel_rules(
        (
            "has(self.queueMicrosecondsPerRequest) != has(self.pendingRequestsPerPod)",
            "set exactly one of queueMicrosecondsPerRequest or pendingRequestsPerPod",
        ),
    )

    queue_microseconds_per_request: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Time a request waits in Triton's queue, in microseconds (nv_inference_queue_duration_us over "
            "nv_inference_request_success, averaged over the models). A dynamic batcher's delay counts as queue time: "
            f"set it above maxQueueDelayMicroseconds. The default target: {DEFAULT_QUEUE_MICROSECONDS_PER_REQUEST}."
        ),
    )
    pending_requests_per_pod: int | None = Field(
        default=None,
        ge=1,
        description="Requests waiting for an execution in one pod (nv_inference_pending_request_count, summed over "
        "its models).",
    )

    @model_validator(mode="after")
    def _one_metric(self) -> Self:
        if (self.queue_microseconds_per_request is None) == (self.pending_requests_per_pod is None):
            raise ValueError("set exactly one of queueMicrosecondsPerRequest or pendingRequestsPerPod")
        return self


class Keda(ApiModel):
    server_address: Annotated[str, StringConstraints(pattern=r"^https?://.+")] = Field(
        description="Address of the Prometheus that KEDA's prometheus trigger queries, e.g. "
        "http://prometheus-operated.monitoring.svc:9090."
    )


class Autoscaling(ApiModel):
    "An autoscaler for the server: a HorizontalPodAutoscaler (metrics from prometheus-adapter) or a KEDA ScaledObject."

    model_config = with_cel_rules(
        (
            "!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",
            "minReplicas is above maxReplicas: lower spec.autoscaling.minReplicas or raise "
            "spec.autoscaling.maxReplicas",
        ),
        (
            "!has(self.engine) || self.engine != 'keda' || has(self.keda)",
            "engine: keda needs keda.serverAddress, the Prometheus that KEDA queries",
        ),
        ("!has(self.keda) || (has(self.engine) && self.engine == 'keda')", "keda is only used with engine: keda"),
    )

    engine: Literal["hpa", "keda"] = Field(
        default="hpa",
        description=(
            "hpa (default): an autoscaling/v2 HorizontalPodAutoscaler on a Pods metric that prometheus-adapter serves "
            "(the chart ships its rules); keda: a KEDA ScaledObject with a Prometheus trigger."
        ),
    )
    min_replicas: int = Field(
        default=1, ge=1, description="Fewest pods (default 1; an idle Triton reports no load to scale up from zero on)."
    )
    max_replicas: int = Field(ge=1, description="Most pods.")
    target: AutoscalingTarget = Field(
        default_factory=lambda: AutoscalingTarget(
            queue_microseconds_per_request=DEFAULT_QUEUE_MICROSECONDS_PER_REQUEST
        ),
        description="The metric and its target per pod (default: queueMicrosecondsPerRequest "
        f"{DEFAULT_QUEUE_MICROSECONDS_PER_REQUEST}).",
    )
    scale_up_stabilization_seconds: int = Field(
        default=0,
        ge=0,
        le=STABILIZATION_LIMIT_SECONDS,
        description="Scale up on the highest recommendation of this window (default 0: at once).",
    )
    scale_down_stabilization_seconds: int = Field(
        default=300,
        ge=0,
        le=STABILIZATION_LIMIT_SECONDS,
        description="Scale down only to the highest recommendation of this window (default 300), so a lull does not "
        "drop pods a burst needs back.",
    )
    keda: Keda | None = Field(default=None, validate_default=True, description="KEDA's settings, with engine: keda.")

    @field_validator("max_replicas")
    @classmethod
    def _not_below_min(cls, max_replicas: int, info: ValidationInfo) -> int:
        """Field validators, so these come in the same run as a mistake in the target."""
        min_replicas = info.data.get("min_replicas")
        if min_replicas is not None and min_replicas > max_replicas:
            raise ValueError(
                f"{max_replicas} is below minReplicas ({min_replicas}): lower spec.autoscaling.minReplicas or raise "
                "spec.autoscaling.maxReplicas"
            )
        return max_replicas

    @field_validator("keda")
    @classmethod
    def _only_with_keda(cls, keda: Keda | None, info: ValidationInfo) -> Keda | None:
        engine = info.data.get("engine")
        if engine == "keda" and keda is None:
            raise ValueError("engine: keda needs keda.serverAddress, the Prometheus that KEDA queries")
        if engine == "hpa" and keda is not None:
            raise ValueError("keda is only used with engine: keda")
        return keda
