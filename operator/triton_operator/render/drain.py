"""How a pod leaves without cutting work: the gRPC connection-age grace, the preStop delay and the
pod's termination grace period, each from TritonServer.spec by one rule.

gRPC's max connection age sends a kept channel a GOAWAY so it reconnects through the Service (to the
pods a scale-up adds, away from a pod that leaves); Triton sends none of its own when it stops. The
calls in flight then go on for the grace, and what still runs at its end is cut (`UNAVAILABLE`).
Measured on Triton 2.51 (docs/triton-facts.md, "Readiness, shutdown, flags"): a decoupled model's
stream longer than the age plus the grace was cut there, on a pod that was not leaving; with a grace
longer than the stream, all of it came. So the grace covers the longest request a server carries
(`spec.drain.maxRequestSeconds`), and the preStop delay covers the endpoints' propagation, one age
and that grace.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI's parser reads the ports beside it without loading the API
    from ..api.server import TritonServerSpec

# gRPC core draws each connection's max age within +-10% of the setting, so connections do not all
# reconnect at once: a channel may be recycled only 1.1 x the age after it opened.
CONNECTION_AGE_JITTER = 0.1
# The grace period covers the preStop delay, then --exit-timeout-secs (after a failed reload Triton
# waits the full timeout), and this much more.
GRACE_BEYOND_EXIT_TIMEOUT_SECONDS = 15


def connection_age_grace_ms(spec: TritonServerSpec) -> int:
    """--grpc-max-connection-age-grace: as set, or the longest request, so a recycled connection
    carries every call it holds to its end."""
    if spec.grpc.max_connection_age_grace_ms is not None:
        return spec.grpc.max_connection_age_grace_ms
    return spec.drain.max_request_seconds * 1000


def pre_stop_seconds(spec: TritonServerSpec) -> int:
    """The preStop delay: as set, or the endpoints' propagation plus the latest a connection opened
    before then is recycled and its calls end; with the age off (kept channels stay anyway), the
    propagation plus the longest request, so calls on connections opened meanwhile end."""
    if spec.drain.pre_stop_seconds is not None:
        return spec.drain.pre_stop_seconds
    age_ms = spec.grpc.max_connection_age_ms
    if age_ms:
        last_call_ends_ms = age_ms * (1 + CONNECTION_AGE_JITTER) + connection_age_grace_ms(spec)
    else:
        last_call_ends_ms = spec.drain.max_request_seconds * 1000
    return spec.drain.endpoints_propagation_seconds + math.ceil(last_call_ends_ms / 1000)


def termination_grace_seconds(spec: TritonServerSpec) -> int:
    """terminationGracePeriodSeconds: counted from the deletion, preStop included, it must outlast
    preStop and Triton's exit timeout, or the kubelet kills Triton mid-exit."""
    return pre_stop_seconds(spec) + spec.exit_timeout_seconds + GRACE_BEYOND_EXIT_TIMEOUT_SECONDS
