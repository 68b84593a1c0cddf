"""Events: the one place the operator posts them. Every other module says what happened as an Event
value, which a pass (or the placement and finalizer tasks) hands here, so what is told, and when, is
decided with the rest of a pass and posted in one step."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from .watch.indexes import event_subject

MESSAGE_LIMIT = 1024  # the API server refuses a longer Event message


@dataclass(frozen=True)
class Event:
    """An Event about one object: a TritonServer or a TritonModel, as indexed or read."""

    about: Mapping[str, Any]
    type: str  # Normal or Warning
    reason: str
    message: str


def post(events: Iterable[Event]) -> None:
    """Post each Event (kopf sends them from its own task: this never waits on the API server)."""
    for event in events:
        kopf.event(
            event_subject(event.about), type=event.type, reason=event.reason, message=event.message[:MESSAGE_LIMIT]
        )
