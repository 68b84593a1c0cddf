"""What Triton's answers about a load mean: where a load whose call was cut stands, and an ensemble's load
answered with a failure though it loaded. Pure: the client (client.py) reads the replica and asks these.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..protocol.names import REVISION_PARAMETER
from ..protocol.triton_proto import model_config_pb2

# Triton's answer to a load it rejected for a reason it only logs, and to an ensemble's load that found
# a step in no repository (one loaded with its files), which it loads all the same (docs/triton-facts.md).
POLL_FAILURE = "failed to poll from model repository"


def ensemble_poll_failure(message: str, sent: model_config_pb2.ModelConfig) -> bool:
    """A load of an ensemble answered POLL_FAILURE: it may have loaded, on steps loaded with their files."""
    return POLL_FAILURE in message and sent.HasField("ensemble_scheduling")


def runs_as_sent(sent: model_config_pb2.ModelConfig, running: model_config_pb2.ModelConfig) -> bool:
    """Whether the config a model runs carries every parameter a load sent, a revision among them: that load
    is what runs (a load without a revision cannot be told from the version before it)."""
    ran = {key: value.string_value for key, value in running.parameters.items()}
    return REVISION_PARAMETER in sent.parameters and all(
        ran.get(key) == value.string_value for key, value in sent.parameters.items()
    )


class LoadProgress(enum.Enum):
    LOADED = "loaded"  # ready at the revision sent
    LOADING = "loading"  # still loading, or failed without a word (see load_progress)
    FAILED = "failed"  # Triton reports the load failed
    LOST = "lost"  # Triton holds nothing of the model: it never got the load, or restarted since


@dataclass(frozen=True)
class LoadSeen:
    """What one look at a replica says about a model being loaded."""

    revision: str | None  # the revision its ready version runs; None when no version is ready
    known: bool  # Triton knows the model (loading, loaded, or failed)
    index_state: str = ""  # its entry in the repository index, for models loaded from the repository
    index_reason: str = ""


def load_progress(seen: LoadSeen, wanted_revision: str) -> LoadProgress:
    """Where a load stands after its call was cut. Triton lists models loaded with files nowhere while
    they load nor after their load failed: their config reads "has no available versions" in both
    cases, or the previous revision's after a reload, so for them a failure looks like loading
    (docs/triton-facts.md); the load's timeout ends it."""
    if seen.revision == wanted_revision:
        return LoadProgress.LOADED
    if seen.index_state == "UNAVAILABLE" and seen.index_reason:
        return LoadProgress.FAILED
    if not seen.known:
        return LoadProgress.LOST
    return LoadProgress.LOADING
