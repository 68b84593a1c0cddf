"""`spec.rollout`: how a model's new revision reaches the pods: all at once, or one canary share first.

A canary rollout loads the new revision on a few pods only, judges it on Triton's own statistics
for those pods (failed requests, time in Triton per request against the other pods'), then
promotes it to every pod or loads the previous revision there again. Triton counts a request that
raises in the model as failed; one a model answers with an error response counts as a success
(measured on Triton 2.51's python backend), so the canary also sends probe requests of its own and
judges their answers as a client would (spec.rollout.probe: their inputs, expected outputs, a
comparison with a stable pod, their bounds). The same probe, once, judges a model's first load on a
pod before it counts ready there (onFirstLoad). Local mode sends the probe as its sample request.
"""

import math
import re
from typing import Annotated, Literal, Self

from pydantic import Field, WithJsonSchema, field_validator, model_validator

from .types import ApiModel, with_cel_rules

PERCENT_PATTERN = r"^([1-9][0-9]?|100)%$"
CanaryPods = Annotated[
    int | str,
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": PERCENT_PATTERN}),
]


POD_COUNT_RULE = "!has(self.pods) || type(self.pods) == string || self.pods >= 1"
POD_COUNT_HINT = "pods is a count of at least 1 or a percent from 1% to 100% (e.g. 1 or 25%)"


class RolloutSpec(ApiModel):
    model_config = with_cel_rules((POD_COUNT_RULE, POD_COUNT_HINT))

    strategy: Literal["AllAtOnce", "Canary"] = Field(
        default="AllAtOnce",
        description="AllAtOnce: every pod reloads the new revision in place at once. Canary: a share of the pods "
        "first, judged over bakeSeconds, then the rest, or back to the previous revision.",
    )
    pods: CanaryPods = Field(
        default=1,
        description="Canary pods: a count (e.g. 1) or a percent of the pods in service (e.g. 25%, rounded up); at "
        "least one.",
    )
    bake_seconds: int = Field(default=60, ge=0, description="How long the canary serves before it is judged.")
    min_requests: int = Field(
        default=100,
        ge=0,
        description="Requests the canary pods must answer (or fail) before a verdict; with fewer, the rollout waits.",
    )
    max_wait_seconds: int = Field(
        default=600,
        ge=0,
        description="How long past bakeSeconds to wait for minRequests; then the status says the canary lacks "
        "traffic, and the rollout holds (canary pods on the new revision, the rest on the old) until traffic comes or "
        "the spec changes.",
    )
    max_failure_ratio: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="Failed requests out of all the canary pods answered for the new revision, above which it is "
        "rolled back.",
    )
    max_latency_ratio: float | None = Field(
        default=2.0,
        ge=1,
        description="The canary's time in Triton per request (queue and compute) against the other pods' over the same "
        "window, above which it is rolled back. Unset: latency is not judged.",
    )

    @field_validator("pods")
    @classmethod
    def _count_or_percent(cls, pods: int | str) -> int | str:
        if (isinstance(pods, int) and pods < 1) or (isinstance(pods, str) and not re.fullmatch(PERCENT_PATTERN, pods)):
            raise ValueError(f"{pods!r}: {POD_COUNT_HINT}")
        return pods

    def canary_count(self, in_service: int) -> int:
        """How many of the pods in service become canaries: at least one, at most all."""
        wanted = self.pods if isinstance(self.pods, int) else math.ceil(in_service * int(self.pods[:-1]) / 100)
        return max(1, min(wanted, in_service))


# Tensor data types by their names in inference requests (KServe v2, as Triton's clients send them).
Datatype = Literal[
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BF16",
    "BYTES",
]
INTEGER_RANGES = {
    f"{sign}INT{bits}": (0, 2**bits - 1) if sign else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    for sign in ("", "U")
    for bits in (8, 16, 32, 64)
}
ProbeData = Annotated[
    list[bool | int | float | str] | str,
    WithJsonSchema(
        {
            "x-kubernetes-preserve-unknown-fields": True,
            "description": "The values in row-major order, as many as the shape holds (numbers, true/false for BOOL, "
            "strings for BYTES); for BYTES also one string, which fills every element.",
        }
    ),
]


def _wrong_value(datatype: str, value: bool | int | float | str) -> str | None:
    """Why `value` cannot be an element of a `datatype` tensor, or None when it can."""
    if datatype == "BYTES":
        return None if isinstance(value, str) else "BYTES takes strings"
    if datatype == "BOOL":
        return None if isinstance(value, bool) else "BOOL takes true or false"
    if isinstance(value, (bool, str)) or (datatype in INTEGER_RANGES and not isinstance(value, int)):
        return f"{datatype} takes {'integers' if datatype in INTEGER_RANGES else 'numbers'}"
    low, high = INTEGER_RANGES.get(datatype, (value, value))
    return None if low <= value <= high else f"{datatype} holds {low} to {high}"


class ProbeTensor(ApiModel):
    """A tensor as Triton's JSON inference protocol writes it (name, datatype, shape, data)."""

    name: str = Field(min_length=1, description="The input's name in the model's config.")
    datatype: Datatype = Field(
        description="FP32 for TYPE_FP32, BYTES for TYPE_STRING, ...: the config's dataType without TYPE_."
    )
    shape: list[Annotated[int, Field(ge=0)]] = Field(
        description="The request's shape: the batch size first when the model batches (maxBatchSize > 0), then the "
        "config's dims with each -1 given a size, e.g. [1, 4]."
    )
    data: ProbeData

    @model_validator(mode="after")
    def _data_fits(self) -> Self:
        if isinstance(self.data, str):
            if self.datatype != "BYTES":
                raise ValueError(f"data: one string fills a BYTES tensor only; give {self.datatype} a list of values")
            return self
        wanted = math.prod(self.shape)
        if len(self.data) != wanted:
            raise ValueError(
                f"data holds {len(self.data)} values, shape {self.shape} holds {wanted}: give one value per element, "
                "in row-major order"
            )
        for index, value in enumerate(self.data):
            if reason := _wrong_value(self.datatype, value):
                raise ValueError(f"data[{index}] is {value!r}: {reason}")
        return self


class ProbeCompare(ApiModel):
    tolerance: float = Field(
        default=0.0,
        ge=0,
        description="The largest absolute difference of an output element between a canary and a stable pod's answer "
        "(strings and booleans must be equal).",
    )


class ProbeSpec(ApiModel):
    """Probe requests: the operator's own requests to the canary pods (and a stable pod) while a revision
    bakes, judged as a client would judge them."""

    inputs: list[ProbeTensor] | None = Field(
        default=None,
        min_length=1,
        description="One request's inputs, every required input of the config once; local mode sends them as the "
        "model's sample request. Unset: the model's modelWarmup, else generated ones.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    expected_outputs: list[ProbeTensor] | None = Field(
        default=None,
        min_length=1,
        description="Outputs the inputs must give, within compare.tolerance (exactly without compare); others are not "
        "compared. Not compared for a decoupled model, whose responses may vary.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    compare: ProbeCompare | None = Field(
        default=None,
        description="Send each probe to a stable pod too and fail the revision where the answers differ beyond the "
        "tolerance: for a change that should not change answers (a config tweak, a backend upgrade). Off by default; "
        "not for a decoupled model, whose responses may vary.",
    )
    max_requests: int = Field(
        default=20,
        ge=0,
        le=1000,
        description="Probe requests per canary pod over a bake (0: none; the canary is judged on Triton's statistics "
        "alone).",
    )
    requests_per_second: float = Field(
        default=2.0, gt=0, le=50, description="The most probe requests per second to each canary pod."
    )
    timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="A probe not answered in this time fails (a decoupled model's: its final response).",
    )
    on_first_load: bool | None = Field(
        default=None,
        description="Send one probe after the model's first load on a pod, before it counts as ready there: a model "
        "that loads but cannot answer (an error response, a timeout, outputs not as promised) is a failed load on "
        "that pod, which never takes the pod into service for it. Unset: on where the model's rollout strategy is "
        "Canary.",
    )

    def probes_first_load(self, strategy: str) -> bool:
        """Whether a first load is probed under the model's rollout `strategy`."""
        return self.on_first_load if self.on_first_load is not None else strategy == "Canary"

    @field_validator("inputs", "expected_outputs")
    @classmethod
    def _each_name_once(cls, tensors: list[ProbeTensor] | None) -> list[ProbeTensor] | None:
        names = [tensor.name for tensor in tensors or []]
        if repeated := sorted({name for name in names if names.count(name) > 1}):
            raise ValueError(f"each name may appear once; repeated: {', '.join(repeated)}")
        return tensors

    @model_validator(mode="after")
    def _outputs_of_given_inputs(self) -> Self:
        if self.expected_outputs and not self.inputs:
            raise ValueError("expectedOutputs are the answer to given inputs: give inputs too")
        return self


class ModelRolloutSpec(RolloutSpec):
    """A model's own rollout: its server's settings, and a probe, which belongs to one model's inputs."""

    probe: ProbeSpec | None = Field(
        default=None,
        description="The canary's probe requests: inputs of your own for inputs no generated data stands for (a model "
        "name, a prompt), outputs expected, a comparison with the stable revision, and their bounds.",
    )


UNSET_PROBE = ProbeSpec()  # made once: a model's probe is read on every pass


def model_probe(own: ModelRolloutSpec | None) -> ProbeSpec:
    """The probe a model's revisions are checked with: its spec.rollout.probe, else the default one."""
    return (own.probe if own is not None else None) or UNSET_PROBE


def effective_rollout(own: ModelRolloutSpec | None, server: RolloutSpec) -> RolloutSpec:
    """The rollout a model's new revisions follow: its own spec.rollout, unless that holds a probe alone
    (a request to send, no rollout settings), which leaves the server's."""
    return server if own is None or own.model_fields_set <= {"probe"} else own
