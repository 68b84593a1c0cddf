"""How requests reach a TritonServer's pods and leave them: gRPC connections and their age, draining a
pod that leaves, the Service and the NetworkPolicy.

Apart from the server's spec as one concern: the connection-age grace and the drain's longest request
are checked against each other, and the rendering of the pod's preStop, its Service and its policy
reads only these.
"""

from typing import Literal, Self

from pydantic import Field, model_validator

from .types import ApiModel, with_cel_rules

# Token streams of language models run for minutes; what a pod carries to its end unless told otherwise.
DEFAULT_MAX_REQUEST_SECONDS = 120


class Keepalive(ApiModel):
    """Triton's six gRPC keepalive flags; unset ones keep Triton's defaults."""

    time_ms: int | None = Field(default=None, ge=1, description="--grpc-keepalive-time (ms between pings).")
    timeout_ms: int | None = Field(
        default=None, ge=1, description="--grpc-keepalive-timeout (ms to wait for a ping ack)."
    )
    permit_without_calls: bool | None = Field(default=None, description="--grpc-keepalive-permit-without-calls.")
    http2_max_pings_without_data: int | None = Field(
        default=None, ge=0, description="--grpc-http2-max-pings-without-data."
    )
    http2_min_recv_ping_interval_without_data_ms: int | None = Field(
        default=None, ge=0, description="--grpc-http2-min-recv-ping-interval-without-data (ms)."
    )
    http2_max_ping_strikes: int | None = Field(default=None, ge=0, description="--grpc-http2-max-ping-strikes.")


class Grpc(ApiModel):
    keepalive: Keepalive | None = None
    max_connection_age_ms: int = Field(
        default=10_000,
        ge=0,
        description="--grpc-max-connection-age (ms): a client's channel is closed (GOAWAY) this long after it opened "
        "and the client reconnects through the Service, so kept channels reach the pods a scale-up adds and leave a "
        "pod being drained; Triton sends no GOAWAY of its own when it stops. Calls in flight go on for the grace. "
        "0 turns it off (kept channels then never leave their pod).",
    )
    max_connection_age_grace_ms: int | None = Field(
        default=None,
        ge=0,
        description="--grpc-max-connection-age-grace (ms): after the GOAWAY, calls in flight go on this long, then the "
        "connection is closed and what is still running is cut (UNAVAILABLE). Unset: drain.maxRequestSeconds. Set "
        "below drain.maxRequestSeconds, the server is refused: lower maxRequestSeconds to say requests are shorter.",
    )


class Drain(ApiModel):
    """How a pod leaves without failing requests: Kubernetes takes a terminating pod out of the Service
    while its preStop runs, asynchronously, so Triton is stopped only once no client can still reach it
    and every request it took has ended."""

    max_request_seconds: int = Field(
        default=DEFAULT_MAX_REQUEST_SECONDS,
        ge=1,
        description=f"The longest request or stream (a decoupled model's token stream) a pod must carry to its end "
        f"(default {DEFAULT_MAX_REQUEST_SECONDS}). The gRPC connection-age grace and the preStop delay follow from it: "
        f"a pod that leaves (scale-down, rollout) waits endpointsPropagationSeconds + 1.1 x maxConnectionAgeMs + this "
        f"before Triton stops (136 s by default), holding its GPUs and memory meanwhile, so lower it for servers "
        f"whose requests are short.",
    )
    endpoints_propagation_seconds: int = Field(
        default=5,
        ge=0,
        description="How long the cluster takes to stop sending new connections to a terminating pod "
        "(EndpointSlices reaching every kube-proxy and load balancer).",
    )
    pre_stop_seconds: int | None = Field(
        default=None,
        ge=0,
        description="The preStop delay before Triton gets SIGTERM. Unset: endpointsPropagationSeconds plus one gRPC "
        "max connection age (with gRPC's 10% jitter) and its grace, so every kept channel has moved to another pod and "
        "every call it carried has ended; with the age off, endpointsPropagationSeconds plus maxRequestSeconds. "
        "0: no delay (requests fail at every scale-down and rollout).",
    )


class Service(ApiModel):
    model_config = with_cel_rules(
        (
            "!has(self.type) || self.type == 'ClusterIP' || (has(self.exposeOutsideCluster) && "
            "self.exposeOutsideCluster)",
            "service.type NodePort or LoadBalancer puts Triton's ports outside the cluster: set "
            "service.exposeOutsideCluster: true to mean it",
        ),
    )

    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    annotations: dict[str, str] = Field(default={})
    expose_outside_cluster: bool = Field(
        default=False,
        description="Must be true for type NodePort or LoadBalancer, which reach Triton's ports from outside the "
        "cluster (inference open to all; the administrative APIs answer only to keys).",
    )

    @model_validator(mode="after")
    def _exposed_only_when_meant(self) -> Self:
        if self.type != "ClusterIP" and not self.expose_outside_cluster:
            raise ValueError(
                f"service.type {self.type} puts Triton's ports outside the cluster: set service.exposeOutsideCluster: "
                "true to mean it, or use ClusterIP"
            )
        return self


class NetworkPeer(ApiModel):
    """Pods let in: those with `podLabels` in the namespaces with `namespaceLabels`."""

    namespace_labels: dict[str, str] | None = Field(
        default=None,
        description="Labels of the namespaces let in; unset: the server's own namespace; {}: every namespace.",
    )
    pod_labels: dict[str, str] = Field(
        default={}, description="Labels of the pods let in; {}: every pod of those namespaces."
    )


# A namespace's name, as a label Kubernetes sets on every namespace.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# Where Prometheus runs in most clusters.
MONITORING_NAMESPACE_LABELS = {NAMESPACE_NAME_LABEL: "monitoring"}


class NetworkPolicySettings(ApiModel):
    """Who reaches the pods. The operator's own pods always reach gRPC (its control path)."""

    enabled: bool = Field(
        default=True,
        description="Render a NetworkPolicy for the pods; false leaves them open to every pod the cluster's network "
        "lets in.",
    )
    inference_from: list[NetworkPeer] = Field(
        default_factory=lambda: [NetworkPeer()],
        description="Who reaches inference (HTTP 8000, gRPC 8001); default: every pod of the server's namespace.",
    )
    metrics_from: list[NetworkPeer] = Field(
        default_factory=lambda: [NetworkPeer(namespace_labels=MONITORING_NAMESPACE_LABELS)],
        description="Who reaches metrics (8002); default: every pod of the namespace named monitoring.",
    )
