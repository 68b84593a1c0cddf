"""Condition types and reasons of both kinds, and the one function that sets them.

A reason names the one thing that failed; the message says which pod or field and carries
Triton's own error text where there is one.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable, Iterable

from ..api.status_fields import Condition
from ..render import moves
from ..triton import batching

# Types
READY = "Ready"
CONFIG_VALID = "ConfigValid"
LOADED = "Loaded"  # TritonModel: loaded at its current revision on every pod
MODELS_READY = "ModelsReady"  # TritonServer: every pod has every model
CHILDREN_OWNED = "ChildrenOwned"  # TritonServer: every object it needs is free to make or the operator's already
KEY_SECRETS_VALID = "KeySecretsValid"  # TritonServer: its key Secrets hold keys the pods can run with
SHARED_MEMORY_SUFFICIENT = "SharedMemorySufficient"
ROLLOUT_HEALTHY = "RolloutHealthy"  # TritonModel with the Canary strategy: did its last revision pass its canary?
PLACED = "Placed"  # TritonModel with a serverSelector: a server holds it (reasons in render/moves.py)
CRASHED_SERVER = "CrashedServer"  # TritonModel: its loads killed a pod's tritonserver; held back (True only)
BATCHING_EFFECTIVE = (
    batching.CONDITION_TYPE
)  # TritonModel with dynamic batching: do executions batch? (reasons in triton/batching.py)

# Reasons for True
VALID = "Valid"
LOADED_EVERYWHERE = "Loaded"
ALL_PODS_READY = "AllPodsReady"
SUFFICIENT = "Sufficient"
READY_REASON = "Ready"
OWNED = "Owned"
STABLE = "Stable"  # RolloutHealthy: one revision serves everywhere, none judged yet
PROMOTED = "Promoted"  # RolloutHealthy: the last revision passed its canary
SERVER_DIED = "ServerDied"  # CrashedServer: a pod's tritonserver died while the model loaded, each time

# Reasons for False: one per failure
INVALID_SPEC = "InvalidSpec"  # the object breaks the API or Triton's config rules
FILES_MISSING = "FilesMissing"  # a ConfigMap or key named in spec.files does not exist
SERVER_NOT_FOUND = "ServerNotFound"  # serverRef names no TritonServer (yet)
SERVER_INVALID = "ServerInvalid"  # the TritonServer itself is refused
LOAD_FAILED = "LoadFailed"  # Triton refused the load on a pod (its text in the message)
PROBE_FAILED = "ProbeFailed"  # loaded on a pod, but its first probe request there failed (why, in the message)
LOADING = "Loading"  # not yet on every pod at its current revision
POD_UNREACHABLE = "PodUnreachable"  # a pod's Triton did not answer the control API
NO_PODS = "NoPods"  # the server has no running pods to load into
PODS_NOT_READY = "PodsNotReady"  # some pods lack some models
TOO_SMALL = "TooSmall"  # /dev/shm is set below what the models need
ROLLED_BACK = "RolledBack"  # RolloutHealthy: the spec's revision failed its canary; the previous one serves
NAME_TAKEN = "NameTaken"  # another object holds the name of a server's child: it is left alone, not written
WRITE_REFUSED = "WriteRefused"  # the API server refused to write a server's child (its words in the message)
KEY_SECRET_INVALID = "KeySecretInvalid"  # a key Secret holds no usable key: the pods keep theirs (message: the fix)
UNSCHEDULABLE = moves.UNSCHEDULABLE  # no server matching the model's serverSelector has room for it

# Each reason for False is work under way, which ends without anyone acting (pods starting, loads
# running, a server not applied yet), or a fault a person must fix in the spec or the model.
# GitOps health checks (docs/gitops.md) call Ready=False Progressing for the first, Degraded for the second.
PROGRESSING_REASONS = frozenset({LOADING, NO_PODS, PODS_NOT_READY, POD_UNREACHABLE, SERVER_NOT_FOUND, UNSCHEDULABLE})
DEGRADED_REASONS = frozenset(
    {
        INVALID_SPEC,
        FILES_MISSING,
        SERVER_INVALID,
        LOAD_FAILED,
        PROBE_FAILED,
        CRASHED_SERVER,
        TOO_SMALL,
        ROLLED_BACK,
        NAME_TAKEN,
        WRITE_REFUSED,
        KEY_SECRET_INVALID,
    }
)

# BatchingEffective's reasons for Unknown, which the operator treats apart
NOT_ENOUGH_TRAFFIC = (
    batching.NOT_ENOUGH_TRAFFIC
)  # too little traffic in the window to judge: the last verdict stands (RolloutHealthy: the canary holds)
DYNAMIC_BATCHING_OFF = batching.DYNAMIC_BATCHING_OFF  # nothing to judge: no condition is set


Clock = Callable[[], str]  # the time now, as a condition's lastTransitionTime


def now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@functools.lru_cache(maxsize=4096)
def condition(type_: str, ok: bool, reason: str, message: str = "") -> Condition:
    """One object for each distinct condition: most models of a server are in the same few, on every pass."""
    return Condition(type=type_, status="True" if ok else "False", reason=reason, message=message)


def merge_conditions(
    previous: Iterable[Condition], current: Iterable[Condition], generation: int | None, clock: Clock = now
) -> list[Condition]:
    """The new conditions, keeping each one's lastTransitionTime while its status stays the same."""
    before = {c.type: c for c in previous}
    merged = []
    for new in current:
        old = before.get(new.type)
        if old is None or old.status != new.status or old.last_transition_time is None:
            since = clock()
        else:
            since = old.last_transition_time
        merged.append(
            new.model_copy(
                update={
                    "last_transition_time": since,
                    "observed_generation": generation,
                }
            )
        )
    return merged


def ready(*conditions: Condition) -> Condition:
    """Ready is True when every other condition is; otherwise it carries the first failure's reason."""
    failing = next((c for c in conditions if c.status != "True"), None)
    if failing is None:
        return condition(READY, True, READY_REASON)
    return condition(READY, False, failing.reason, failing.message)
