"""Placement pass after pass: where each model with a serverSelector runs next, given where it runs now.

Pure: the operator observes the servers, the models (their figures and `status.placement`) and which
servers serve which models; this module returns each model's next `status.placement`. The rules:

- Where: `place` (render/placement.py), the model keeping the server it runs on, or the one it is
  moving to, while that server still takes it and holds it.
- Make before break: a model leaving a server that still runs is loaded on its new server first
  (`target`, reason Moving), named there (`server`) only once every pod of that server serves it, and
  kept loaded on the old one (`previous`) for `drain_seconds` more, so a client that read the old name
  just before is still answered there.
- A server with no pod left (scaled to zero, or gone) keeps nothing: its models are named on their new
  server at once.
- Hysteresis: a model that moved stays `hold_seconds` on its new server, even over its room, unless
  that server stops taking models (deleted, scaled to zero, no longer matching the selector).
- No room anywhere: a model stays on the server it runs on while that server has pods, with
  Placed=False Unschedulable; nothing takes a serving model away to nowhere.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..api.status_fields import PlacementStatus
from .placement import ModelDemand, Placement, ServerRoom, place, readable_bytes

PLACED = "Placed"
MOVING = "Moving"
MOVED = "Moved"
UNSCHEDULABLE = "Unschedulable"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # as conditions' times

# (namespace, server, Triton model name) -> whether every pod of the server serves the model now
Serves = Callable[[str, str, str], bool]


@dataclass(frozen=True)
class ModelSeen:
    """A model as a placement pass sees it: its demand (a named one only counts on its server), Triton's
    name for it, and its placement as last written (None: never placed, or named)."""

    uid: str
    demand: ModelDemand
    model_name: str
    placement: PlacementStatus | None = None


def _seconds_since(moment: str | None, now: datetime.datetime) -> float:
    if moment is None:
        return float("inf")
    then = datetime.datetime.strptime(moment, TIME_FORMAT).replace(tzinfo=datetime.UTC)
    return (now - then).total_seconds()


class _Fleet:
    """The servers of a pass, by (namespace, name)."""

    def __init__(self, servers: Sequence[ServerRoom]):
        self.rooms = {(room.namespace, room.name): room for room in servers}

    def runs(self, namespace: str, name: str | None) -> bool:
        """The server has pods: a model there is served (a server being deleted still runs until its models left)."""
        room = self.rooms.get((namespace, name or ""))
        return room is not None and room.replicas > 0

    def takes(self, model: ModelDemand, name: str) -> bool:
        room = self.rooms.get((model.namespace, name))
        return (
            room is not None
            and room.replicas > 0
            and not room.leaving
            and model.selector is not None
            and model.selector.matches(room.labels)
        )

    def why_leaving(self, model: ModelDemand, name: str) -> str:
        room = self.rooms.get((model.namespace, name))
        if room is None:
            return f"TritonServer {name} is gone"
        if room.leaving:
            return f"TritonServer {name} is being deleted"
        if room.replicas == 0:
            return f"TritonServer {name} is scaled to zero"
        if model.selector is None or not model.selector.matches(room.labels):
            return f"TritonServer {name} no longer matches {model.selector}"
        return f"TritonServer {name} has no room for its {readable_bytes(model.memory_bytes)} ({model.source.value})"


def next_placements(
    servers: Sequence[ServerRoom],
    models: Sequence[ModelSeen],
    serves: Serves,
    now: datetime.datetime,
    hold_seconds: float,
    drain_seconds: float,
) -> tuple[dict[str, PlacementStatus], Placement]:
    """Each selector model's next placement, by uid; and the placement it comes from (every server's load)."""
    fleet = _Fleet(servers)
    demands = []
    for seen in models:
        demand, written = seen.demand, seen.placement
        if demand.selector is not None and written is not None and written.server:
            held = written.target is None and _seconds_since(written.moved_at, now) < hold_seconds
            if held and fleet.takes(demand, written.server):
                demand = dataclasses.replace(demand, selector=None, server=written.server)  # counted there, not moved
            else:
                demand = dataclasses.replace(demand, current=written.target or written.server)
        demands.append(demand)
    placement = place(servers, demands)
    decided = {}
    for seen, placed in zip(models, placement.models, strict=False):
        if seen.demand.selector is not None:
            decided[seen.uid] = _next(seen, placed.server, placed.message, fleet, serves, now, drain_seconds)
    return decided, placement


def _next(
    seen: ModelSeen,
    chosen: str | None,
    message: str,
    fleet: _Fleet,
    serves: Serves,
    now: datetime.datetime,
    drain_seconds: float,
) -> PlacementStatus:
    written = seen.placement or PlacementStatus()
    namespace = seen.demand.namespace
    serving = written.server if fleet.runs(namespace, written.server) else None
    drained = _seconds_since(written.moved_at, now) >= drain_seconds
    previous = written.previous if fleet.runs(namespace, written.previous) and not drained else None
    kept = {"previous": previous, "moved_at": written.moved_at}
    if chosen is None:
        if serving is None:
            return PlacementStatus(reason=UNSCHEDULABLE, message=message)
        stays = f"{fleet.why_leaving(seen.demand, serving)}; it stays there until a server has room. {message}"
        return PlacementStatus(server=serving, reason=UNSCHEDULABLE, message=stays, **kept)
    if chosen == serving:
        return PlacementStatus(
            server=serving, reason=MOVED if previous else PLACED, message=written.message if previous else "", **kept
        )
    if serving is None:  # first placed, or its server has no pod left: nothing serves it to keep
        if written.server is None:
            return PlacementStatus(server=chosen, reason=PLACED)
        moved = f"moved from {written.server}: {fleet.why_leaving(seen.demand, written.server)}"
        return PlacementStatus(server=chosen, reason=MOVED, message=moved, moved_at=now.strftime(TIME_FORMAT))
    why = fleet.why_leaving(seen.demand, serving)
    if serves(namespace, chosen, seen.model_name):
        return PlacementStatus(
            server=chosen,
            previous=serving,
            reason=MOVED,
            message=f"moved from {serving}: {why}",
            moved_at=now.strftime(TIME_FORMAT),
        )
    loading = f"loading on {chosen}; {serving} serves it until every pod of {chosen} does: {why}"
    return PlacementStatus(server=serving, target=chosen, reason=MOVING, message=loading, **kept)


def placement_servers(placement: PlacementStatus | None) -> list[str]:
    """The servers a model is loaded on for its placement: where it serves, moves to, and moved from."""
    if placement is None:
        return []
    return sorted({name for name in (placement.server, placement.target, placement.previous) if name})


def placed_on(placements: Mapping[str, PlacementStatus]) -> set[str]:
    """Every server some model's placement names."""
    return {name for placement in placements.values() for name in placement_servers(placement)}
