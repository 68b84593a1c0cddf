"""The operator's settings, from `TRITON_OPERATOR_*` environment variables, checked at start-up."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Each setting is documented once, here; the chart sets them as environment variables."""

    model_config = SettingsConfigDict(env_prefix="TRITON_OPERATOR_", frozen=True, extra="ignore")

    resync_seconds: float = Field(
        default=60,
        gt=0,
        description=(
            "Every server's models are re-read from every pod this often, so drift (a model unloaded by "
            "hand; a Deployment, Service or config ConfigMap deleted) is corrected; each server at a point "
            "of its own in the period, so servers do not resync at once."
        ),
    )
    rollout_poll_seconds: float = Field(
        default=2,
        gt=0,
        description=(
            "While a canary rollout is in flight, its server's pods are synced and their statistics read this often."
        ),
    )
    parallel_loads: int = Field(
        default=4,
        ge=1,
        description="Loads, and as many unloads, running at once on one pod (reloads run one at a time).",
    )
    parallel_pods: int = Field(default=8, ge=1, description="Pods of one server synced at once.")
    health_check_seconds: float = Field(
        default=10,
        ge=0,
        description=(
            "How often each pod's statistics are read between passes to find a model that reads ready but "
            "fails every request (a crashed python stub), which is then reloaded in place on that pod; 0 "
            "turns the check between passes off (passes still make it)."
        ),
    )
    memory_read_seconds: float = Field(
        default=30,
        gt=0,
        description=(
            "A pod's memory sidecar (a TritonServer's memoryReader) is read "
            "after its models change, at most this often."
        ),
    )
    move_drain_seconds: float = Field(
        default=30,
        ge=0,
        description=(
            "A model that moved to another server (a serverSelector's placement) stays loaded on the one it left "
            "this long after status.placement names the new one, for clients that read the old name just before."
        ),
    )
    move_hold_seconds: float = Field(
        default=300,
        ge=0,
        description=(
            "A model that moved stays this long on its new server before it moves again for room (a server deleted, "
            "scaled to zero or no longer matching moves it at once): placement never flaps."
        ),
    )
    read_timeout_seconds: float = Field(
        default=10, gt=0, description="Bound of a control-API read (index, model state)."
    )
    load_timeout_seconds: float = Field(default=600, gt=0, description="Bound of one model load or reload.")
    retry_seconds: float = Field(
        default=2,
        gt=0,
        description=(
            "First wait before a pass that did not finish (a pod that did not answer, a write the "
            "API server refused) is tried again; doubles up to resync_seconds."
        ),
    )
    finalizer_timeout_seconds: float = Field(
        default=300,
        gt=0,
        description=(
            "How long a deleted TritonModel waits for its unload from every pod "
            "before it is released with a Warning Event."
        ),
    )
    watch_server_timeout_seconds: int = Field(
        default=120,
        gt=0,
        description=(
            "How long the API server keeps one watch request open before it ends "
            "it; the watch then resumes where it left off."
        ),
    )
    watch_client_timeout_seconds: float = Field(
        default=150,
        gt=0,
        description=(
            "How long the operator keeps one watch request open at most, above watch_server_timeout_seconds: a watch "
            "stream that stalls without a word (a load balancer that lost the API server's side) is replaced by then."
        ),
    )
    watch_connect_timeout_seconds: float = Field(
        default=30, gt=0, description="Bound of connecting to the API server for a watch request."
    )
    control_key_max_age_seconds: float = Field(
        default=0,
        ge=0,
        description=(
            "A server's control key is replaced once it is this old, which rolls its pods (a rolling update, "
            "as for any template change); 0 (the default) replaces it only on request, by a new value of the "
            "TritonServer's annotation triton-operator.io/rotate-control-key."
        ),
    )
    metrics_port: int = Field(
        default=8080, ge=0, le=65535, description="Port of the Prometheus /metrics endpoint; 0 turns it off."
    )
    liveness_port: int = Field(
        default=8081, ge=0, le=65535, description="Port of the liveness endpoint /healthz; 0 turns it off."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", description="Log level of the operator."
    )
    leader_election: bool = Field(
        default=False,
        description=(
            "Reconcile only while holding a Lease, so of several replicas one is "
            "active and the others stand by (the chart turns it on)."
        ),
    )
    lease_name: str = Field(
        default="triton-operator", min_length=1, description="Name of the Lease the replicas elect their leader with."
    )
    lease_namespace: str = Field(
        default="",
        description=(
            "Namespace of the Lease; empty: the pod's own (POD_NAMESPACE, from the downward API), else `default`."
        ),
    )
    lease_duration_seconds: int = Field(
        default=15,
        ge=1,
        description=(
            "A standby takes the Lease over when its holder has not renewed it for "
            "this long, as the standby observed it (its own clock)."
        ),
    )
    renew_deadline_seconds: float = Field(
        default=10,
        gt=0,
        description=(
            "A leader that could not renew the Lease for this long stops reconciling and stands by "
            "again, leading again once it can; below lease_duration_seconds."
        ),
    )
    retry_period_seconds: float = Field(
        default=2, gt=0, description="How often the leader renews the Lease and a standby reads it."
    )

    operator_namespace: str = Field(
        default="",
        description=(
            "Namespace of the operator's pods, which each server's NetworkPolicy lets in to gRPC (the control path); "
            "empty: the pod's own (POD_NAMESPACE, from the downward API), else `triton-operator`."
        ),
    )
    operator_pod_labels: dict[str, str] = Field(
        default={
            "app.kubernetes.io/name": "triton-operator"
        },  # the chart's default (render/manifests.py OPERATOR_POD_LABELS)
        description=(
            "Labels of the operator's pods (JSON), which each server's "
            "NetworkPolicy lets in to gRPC; the chart sets its own."
        ),
    )

    @model_validator(mode="after")
    def _lease_timing(self) -> Self:
        """client-go's rules: a leader gives up before anyone can take over, and tries more than once before."""
        if (
            self.leader_election
            and not self.lease_duration_seconds > self.renew_deadline_seconds > 1.2 * self.retry_period_seconds
        ):
            raise ValueError(
                "leader election needs lease_duration_seconds > renew_deadline_seconds > 1.2 x "
                f"retry_period_seconds, got {self.lease_duration_seconds}, {self.renew_deadline_seconds}, "
                f"{self.retry_period_seconds}"
            )
        return self

    @model_validator(mode="after")
    def _client_outlasts_server(self) -> Self:
        """The API server ends a healthy watch first; the client's timeout is for a stalled one."""
        if self.watch_client_timeout_seconds <= self.watch_server_timeout_seconds:
            raise ValueError("watch_client_timeout_seconds must be above watch_server_timeout_seconds")
        return self
