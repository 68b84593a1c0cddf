"""Status of both kinds: conditions with reasons and Triton's own words, per-replica model state."""

import enum
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError

from .types import ApiModel


class Condition(ApiModel):
    model_config = ConfigDict(frozen=True)  # one object is shared by every model in that condition

    type: str = Field(description="Ready, ConfigValid, ModelsReady, SharedMemorySufficient, ...")
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(default="", description="One CamelCase word naming why.")
    message: str = Field(default="", description="What happened, with Triton's own error text where there is one.")
    last_transition_time: str | None = None
    observed_generation: int | None = None


class ReplicaModelState(ApiModel):
    pod: str
    state: str = Field(description="Triton's state of the model on this pod: READY, UNAVAILABLE, LOADING, ...")
    version: str = ""
    revision: str = Field(default="", description="The config revision loaded on this pod.")
    reason: str = Field(
        default="", description="Triton's error text when the model is not ready or its last load failed."
    )


class BatchingStatus(ApiModel):
    """What the batcher did between the operator's last two reads of Triton's statistics, summed over pods."""

    requests: int = Field(description="Requests Triton answered in the window.")
    executions: int = Field(description="Model executions they took: fewer than requests when batches formed.")
    average_batch_size: float = Field(description="Requests per execution.")
    max_batch_size: int = Field(description="The configured maxBatchSize.")
    batch_sizes: dict[str, int] = Field(default={}, description="Executions per executed batch size.")
    queue_ms_per_request: float = Field(description="Time a request waited in Triton's queue, on average.")
    compute_ms_per_execution: float = Field(description="Time an execution took (input, infer, output), on average.")
    window_seconds: float | None = Field(
        default=None, description="The window's length; absent for the counters since the model's load."
    )


class WindowCounters(ApiModel):
    """Triton's counters for the model on one pod when the bake began: the window starts from them."""

    requests: int = 0
    failures: int = 0
    request_ns: int = 0


class ProbeCounters(ApiModel):
    sent: int = Field(default=0, description="Probe requests answered or timed out.")
    failed: int = Field(
        default=0, description="Those a client would count failed, or whose outputs differ from the stable pod's."
    )
    last_failure: str = Field(default="", description="Why the last one failed.")


class RolloutPhase(enum.StrEnum):
    """Where a canary rollout stands: the one list of phases, which the rollout's decisions use too."""

    STABLE = "Stable"
    PROGRESSING = "Progressing"
    BAKING = "Baking"
    ROLLED_BACK = "RolledBack"


class RolloutStatus(ApiModel):
    """Where a canary rollout stands: written before each step it takes, so an operator restarted
    mid-bake resumes or finishes it from here."""

    phase: RolloutPhase = Field(
        description="Stable: one revision serves on every pod. Progressing: the canary pods load the new revision. "
        "Baking: they serve it and are judged. RolledBack: it failed and the previous revision serves everywhere."
    )
    revision: str = Field(description="The revision the spec asks for.")
    stable_revision: str = Field(
        description="The revision serving on every pod that is not a canary; kept in a ConfigMap for rollbacks."
    )
    previous_revision: str | None = Field(
        default=None, description="The stable revision before it, whose ConfigMap is kept too."
    )
    canary_pods: list[str] = Field(default=[], description="The pods running the new revision while it is judged.")
    bake_started_at: str | None = Field(default=None, description="When every canary pod served the new revision.")
    baseline: dict[str, WindowCounters] = Field(
        default={}, description="Per pod, Triton's counters when the bake began."
    )
    probes: dict[str, ProbeCounters] = Field(default={}, description="Per canary pod, the bake's probe requests.")
    message: str = Field(default="", description="The verdict or the wait, with its figures.")
    holding: bool | None = Field(
        default=None,
        description="True while the rollout holds for traffic: its bake and maxWaitSeconds are over and the canary "
        "answered fewer than minRequests.",
    )


class MemoryStatus(ApiModel):
    """What one copy of the model costs on a pod: the figure placement counts for it."""

    model_config = ConfigDict(frozen=True)  # one object is shared by the models declaring the same figure

    cpu_bytes: int = Field(description="Host memory: its python stubs' private memory once measured.")
    gpu_bytes: int = Field(
        default=0,
        description="GPU memory, over all its instances: as its backend reported it to Triton, or its python stubs "
        "hold, once measured.",
    )
    source: Literal["Measured", "Declared", "Default"] = Field(
        description="Measured on a pod (host or GPU memory, or both: a part not measured is the declared one); else "
        "Declared in spec.memory; else Default, the least a python model was seen to cost."
    )
    measured_at: str | None = Field(
        default=None, description="When it was measured (the later part); absent unless Measured."
    )


class PlacementStatus(ApiModel):
    """Where a model with a serverSelector runs, written by the operator's placement. A client sends the
    model's requests to `server`'s Service; a move loads the model on `target` first and names it
    `server` only once it serves there, and unloads it from `previous` only after clients had time
    to follow."""

    server: str | None = Field(
        default=None, description="The TritonServer serving the model; absent while no server has room."
    )
    target: str | None = Field(
        default=None, description="The server it moves to: loading there, still served by `server`."
    )
    previous: str | None = Field(
        default=None, description="The server it moved from, still loaded there until clients follow."
    )
    reason: str = Field(default="", description="Placed, Moving, Moved, Unschedulable.")
    message: str = Field(default="", description="Why here, or each candidate's free memory when no server has room.")
    moved_at: str | None = Field(
        default=None, description="When it last moved: it stays a while before it moves again."
    )


PLACEMENT_SERVERS = ("server", "target", "previous")


def written_placement(written: Any) -> PlacementStatus | None:
    """A model's status.placement as it reads: where it does not validate (edited by hand, or of another
    shape), the server names it holds as strings, so a model is still unloaded from where it is."""
    if not written:
        return None
    try:
        return PlacementStatus.model_validate(written)
    except ValidationError:
        names = written if isinstance(written, Mapping) else {}
        return PlacementStatus(**{key: names[key] for key in PLACEMENT_SERVERS if isinstance(names.get(key), str)})


class TritonModelStatus(ApiModel):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default=[])
    server: str | None = Field(default=None, description="The TritonServer serving the model.")
    model_name: str | None = Field(default=None, description="The name the model is loaded under in Triton.")
    replicas: str | None = Field(default=None, description="Ready replicas out of all, e.g. 2/3.")
    replica_states: list[ReplicaModelState] = Field(default=[])
    config_hash: str | None = Field(
        default=None, description="The config's revision: a hash of the rendered config and the model files."
    )
    shared_memory_bytes: int | None = Field(default=None, description="This model's share of /dev/shm.")
    batching: BatchingStatus | None = Field(
        default=None, description="Triton's own batching statistics; the BatchingEffective condition judges them."
    )
    rollout: RolloutStatus | None = Field(default=None, description="Present with the Canary strategy.")
    memory: MemoryStatus | None = Field(
        default=None, description="What the model costs on a pod, and whence the figure."
    )
    placement: PlacementStatus | None = Field(
        default=None, description="Present with a serverSelector: the server it is placed on."
    )


class AutoscalingStatus(ApiModel):
    """The autoscaler the operator runs for the server, and the metric as it last read it."""

    engine: Literal["hpa", "keda"] = Field(
        description="What the operator made: a HorizontalPodAutoscaler (hpa) or a KEDA ScaledObject (keda)."
    )
    autoscaler: str = Field(
        description="The HorizontalPodAutoscaler that scales the server: the operator's, or the one KEDA makes for "
        "its ScaledObject."
    )
    metric: str = Field(description="The target's metric: queueMicrosecondsPerRequest or pendingRequestsPerPod.")
    target: int = Field(description="Its target, per pod.")
    current: float | None = Field(
        default=None,
        description="Its value, averaged over the pods, as the autoscaler last read it; absent until it has.",
    )
    message: str = Field(
        default="", description="Why the autoscaler cannot scale, in its own words (e.g. a metric nobody serves)."
    )


class TritonServerStatus(ApiModel):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default=[])
    replicas: int | None = Field(
        default=None,
        description="The replicas the operator has applied to the Deployment (the scale subresource's status).",
    )
    ready_replicas: int | None = Field(default=None, description="Pods with every model loaded: in the Service.")
    selector: str | None = Field(
        default=None,
        description="The label selector of the server's pods, for the scale subresource (an HPA reads their metrics).",
    )
    autoscaling: AutoscalingStatus | None = Field(default=None, description="Present while spec.autoscaling is set.")
    models: list[str] = Field(default=[], description="Models declared for this server.")
    managed_models: list[str] = Field(
        default=[],
        description=(
            "Triton models the operator has loaded on this server's pods, kept so a model that moved or went "
            "while the operator was down is still unloaded (models loaded with files are not in Triton's index)."
        ),
    )
    shared_memory_bytes: int | None = Field(default=None, description="The computed /dev/shm size of each pod.")
