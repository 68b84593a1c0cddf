"""The readinessGate condition of a server's pods: whether a pod serves what it must, so its Service
sends it traffic. A pure function of its sync's report and its standing, like the statuses
(decide/status_content.py), but written on the pod (k8s/pods/pod_sync.py) and deciding traffic, not telling users.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..protocol.desired import DesiredModel
from ..render.deployment import MODELS_READY_CONDITION
from . import conditions as c

if TYPE_CHECKING:  # a report is read here, never made: its module runs the syncs over gRPC
    from ..triton.sync import ReplicaReport


@dataclass(frozen=True)
class PodStanding:
    """What a pod's gate is judged against besides its own report: whether it is in service now, what it
    served, and what the server's other pods serve."""

    in_service: bool = False  # its readinessGate condition is True
    served: frozenset[str] | None = (
        None  # models ready on it at its last answered sync; None: none seen since the operator started
    )
    ready_elsewhere: frozenset[str] = (
        frozenset()
    )  # models ready on another pod of the server at that pod's last answered sync


def pod_condition(
    desired: Mapping[str, DesiredModel],
    report: ReplicaReport,
    standing: PodStanding = PodStanding(),
    clock: c.Clock = c.now,
) -> dict[str, Any] | None:
    """The readinessGate condition: whether the pod serves what it must, so the Service sends it traffic.

    - A pod in service stays in service while it loads or fails a model new to it: that is the model's
      failure (its status, a Warning Event, the failed-models metric), never a reason to take every
      model the pod serves out of the Service. It leaves only when Triton says a model it served is
      gone from it (Triton restarted, the model was unloaded by hand).
    - A pod not in service (new, restarted, or just after the operator started) enters once every
      desired model is ready on it, except one that failed to load on it and is ready on no other pod:
      a bad new model never keeps a scale-up or a rollout's new pod out of service. A model still
      loading is waited for, so a new pod never takes traffic for a model it lacks.
    - A model that loaded but failed its first probe on the pod (`report.probe_failed`) is not ready
      there, and counts as a failed load.

    None when the pod did not answer: what the operator cannot see never takes a pod out of service
    (nor puts one in)."""
    if report.error:
        return None
    failures = report.failed | report.probe_failed
    missing = sorted(
        name
        for name in desired
        if not (report.states.get(name) and report.states[name].ready) or name in report.probe_failed
    )
    if standing.in_service and standing.served is not None:
        needed = [name for name in missing if name in standing.served]
    else:
        needed = [name for name in missing if name not in failures or name in standing.ready_elsewhere]
    failed = {name: failures[name] for name in needed if name in failures}
    if failed:
        ok, reason, message = False, c.LOAD_FAILED, "; ".join(f"{name}: {error}" for name, error in failed.items())
    elif needed:
        ok, reason, message = False, c.LOADING, f"not ready yet: {', '.join(needed)}"
    else:
        ok, reason, message = True, c.LOADED_EVERYWHERE, f"{len(desired) - len(missing)} models ready"
        if missing:
            message += f"; not ready here, the models' own failure or load (see their status): {', '.join(missing)}"
    return {
        "type": MODELS_READY_CONDITION,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": clock(),
    }
