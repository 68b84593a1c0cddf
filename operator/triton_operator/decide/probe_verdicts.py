"""A canary's probe requests, counted and judged: what a bake's probes add up to on each canary pod, and
whether their failures roll the revision back.

Its own module because Triton counts a python model's error response as a success, so its statistics
cannot see such failures: the probes (k8s/rollouts/canary_prober.py) answer what a client would count failed, and
these functions keep their tally in `status.rollout.probes` and judge it on the rollout's
maxFailureRatio, against all the probes the bake may send (maxRequests) until it is over, so a share
of failures no later success brings back under the ratio rolls back at once. decide/rollout_plan.py's
judge reads them beside Triton's counters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..api.rollout_spec import ProbeSpec
from ..api.status_fields import ProbeCounters

# How much of a failed probe's reason status keeps.
LAST_FAILURE_CHARS = 300


def tally(probes: Mapping[str, ProbeCounters], answers: Mapping[str, Sequence[str | None]]) -> dict[str, ProbeCounters]:
    """The bake's probe counters with this pass's answers (by pod: why each failed, None where it did not)."""
    tallied = dict(probes)
    for pod, failures in answers.items():
        before = tallied.get(pod, ProbeCounters())
        failed = [why for why in failures if why is not None]
        last = (
            failed[-1].strip().splitlines()[0][:LAST_FAILURE_CHARS] if failed else before.last_failure
        )  # a traceback's first line says it
        tallied[pod] = ProbeCounters(
            sent=before.sent + len(failures), failed=before.failed + len(failed), last_failure=last
        )
    return tallied


def probe_failure(
    probes: Mapping[str, ProbeCounters],
    canaries: Sequence[str],
    probe: ProbeSpec,
    max_failure_ratio: float,
    baked: bool,
) -> str | None:
    """Why the canary's probes fail the revision, or None: failures above the ratio of the probes sent,
    counted against all the bake may send (maxRequests) until the bake is over."""
    for pod in canaries:
        counters = probes.get(pod)
        if counters is None or not counters.failed:
            continue
        judged_against = counters.sent if baked else max(counters.sent, probe.max_requests)
        if counters.failed > max_failure_ratio * judged_against:
            return f"{counters.failed} of {counters.sent} probe requests failed on pod {pod}: '{counters.last_failure}'"
    return None


def probe_figures(probes: Mapping[str, ProbeCounters], canaries: Sequence[str]) -> str:
    sent = sum(probes[pod].sent for pod in canaries if pod in probes)
    failed = sum(probes[pod].failed for pod in canaries if pod in probes)
    return f"; {sent} probe requests, {failed} failed" if sent else ""
