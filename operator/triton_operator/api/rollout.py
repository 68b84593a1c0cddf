"""`spec.rollout`: how a model's new revision reaches the pods: all at once, or one canary share first.

A canary rollout loads the new revision on a few pods only, judges it on Triton's own statistics
for those pods (failed requests, time in Triton per request against the other pods'), then
promotes it to every pod or loads the previous revision there again. Triton counts a request that
raises in the model as failed; one a model answers with an error response counts as a success
(measured on Triton 2.51's python backend), so only the first kind can fail a canary.
"""

import math
import re
from typing import Annotated, Literal

from pydantic import Field, WithJsonSchema, field_validator

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
        description="Canary pods: a count (e.g. 1) or a percent of the pods in service (e.g. 25%, rounded up); at least one.",
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
        description="How long past bakeSeconds to wait for minRequests; then the status says the canary lacks traffic, "
        "and the rollout holds (canary pods on the new revision, the rest on the old) until traffic comes or the spec changes.",
    )
    max_failure_ratio: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="Failed requests out of all the canary pods answered for the new revision, above which it is rolled back.",
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
        if isinstance(pods, int) and pods < 1 or isinstance(pods, str) and not re.fullmatch(PERCENT_PATTERN, pods):
            raise ValueError(f"{pods!r}: {POD_COUNT_HINT}")
        return pods

    def canary_count(self, in_service: int) -> int:
        """How many of the pods in service become canaries: at least one, at most all."""
        if isinstance(self.pods, int):
            wanted = self.pods
        else:
            wanted = math.ceil(in_service * int(self.pods[:-1]) / 100)
        return max(1, min(wanted, in_service))
