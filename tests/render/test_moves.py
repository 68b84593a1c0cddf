"""Placement pass after pass (render/moves.py): where a model runs next, as a table of situations."""

from __future__ import annotations

import datetime

import pytest

from triton_operator.api.status_fields import PlacementStatus
from triton_operator.api.types import LabelSelector, MiB
from triton_operator.render.moves import (
    MOVED,
    MOVING,
    PLACED,
    TIME_FORMAT,
    UNSCHEDULABLE,
    ModelSeen,
    next_placements,
    placement_servers,
)
from triton_operator.render.placement import MemorySource, ModelDemand, ServerRoom

NOW = datetime.datetime(2026, 11, 26, 12, 0, 0, tzinfo=datetime.UTC)
POOL = LabelSelector.model_validate({"matchLabels": {"pool": "cpu"}})
HOLD, DRAIN = 300.0, 30.0


def ago(seconds: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds)).strftime(TIME_FORMAT)


def room(
    name: str, free_mib: int = 100, replicas: int = 1, leaving: bool = False, labels: dict[str, str] | None = None
) -> ServerRoom:
    return ServerRoom(
        "default", name, {"pool": "cpu"} if labels is None else labels, replicas, free_mib * MiB, leaving=leaving
    )


def model(name: str, mib: int = 40, placement: PlacementStatus | None = None) -> ModelSeen:
    return ModelSeen(
        name, ModelDemand("default", name, mib * MiB, MemorySource.DECLARED, selector=POOL), name, placement
    )


def decide(
    servers: list[ServerRoom], models: list[ModelSeen], serving: set[tuple[str, str]] = frozenset()
) -> dict[str, PlacementStatus]:  # type: ignore[assignment]
    decided, _ = next_placements(servers, models, lambda _ns, server, name: (server, name) in serving, NOW, HOLD, DRAIN)
    return decided


def test_a_new_model_goes_to_the_best_fit_and_stays_there_while_it_fits() -> None:
    servers = [room("a", 100), room("b", 50)]
    assert decide(servers, [model("m")]) == {"m": PlacementStatus(server="b", reason=PLACED)}
    placed = PlacementStatus(server="a", reason=PLACED)  # placed on a when b was full, say
    assert decide(servers, [model("m", placement=placed)]) == {"m": placed}


def test_a_move_loads_first_names_the_new_server_once_it_serves_then_drains_the_old() -> None:
    servers = [room("a", leaving=True), room("b")]
    on_a = PlacementStatus(server="a", reason=PLACED)
    [moving] = decide(servers, [model("m", placement=on_a)]).values()
    assert (moving.server, moving.target, moving.reason) == ("a", "b", MOVING)
    assert moving.message == "loading on b; a serves it until every pod of b does: TritonServer a is being deleted"
    assert placement_servers(moving) == ["a", "b"]  # loaded on both while it moves
    assert decide(servers, [model("m", placement=moving)])["m"] == moving  # b does not serve it yet
    [moved] = decide(servers, [model("m", placement=moving)], serving={("b", "m")}).values()
    assert (moved.server, moved.target, moved.previous, moved.reason, moved.moved_at) == (
        "b",
        None,
        "a",
        MOVED,
        NOW.strftime(TIME_FORMAT),
    )
    assert placement_servers(moved) == ["a", "b"]  # still on a for clients that read the old name
    draining = moved.model_copy(update={"moved_at": ago(DRAIN - 1)})
    assert decide(servers, [model("m", placement=draining)])["m"].previous == "a"
    drained = moved.model_copy(update={"moved_at": ago(DRAIN)})
    assert decide(servers, [model("m", placement=drained)])["m"] == PlacementStatus(
        server="b", reason=PLACED, moved_at=ago(DRAIN)
    )


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"replicas": 0}, "TritonServer a is scaled to zero"),
        ({"gone": True}, "TritonServer a is gone"),
    ],
)
def test_a_server_without_pods_hands_its_models_over_at_once(change: dict[str, object], why: str) -> None:
    """Nothing serves them there: there is nothing to make before breaking."""
    servers = [room("b")] if change.get("gone") else [room("a", replicas=0), room("b")]
    [moved] = decide(servers, [model("m", placement=PlacementStatus(server="a", reason=PLACED))]).values()
    assert (moved.server, moved.previous, moved.reason, moved.message) == ("b", None, MOVED, f"moved from a: {why}")


def test_a_server_that_no_longer_matches_loses_its_models_by_make_before_break() -> None:
    servers = [room("a", labels={"pool": "gpu"}), room("b")]
    [moving] = decide(servers, [model("m", placement=PlacementStatus(server="a", reason=PLACED))]).values()
    assert (moving.server, moving.target) == ("a", "b") and moving.message.endswith(
        "TritonServer a no longer matches pool=cpu"
    )


def test_no_room_anywhere_keeps_a_serving_model_where_it_runs_and_says_what_each_server_has() -> None:
    servers = [room("a", 30), room("b", 20)]
    [nowhere] = decide(servers, [model("m", 40)]).values()
    assert nowhere == PlacementStatus(
        reason=UNSCHEDULABLE, message="0/2 servers have room for 40Mi (Declared): a (30Mi free), b (20Mi free)"
    )
    [stays] = decide(servers, [model("m", 40, placement=PlacementStatus(server="a", reason=PLACED))]).values()
    assert (stays.server, stays.reason) == ("a", UNSCHEDULABLE)
    assert stays.message.startswith(
        "TritonServer a has no room for its 40Mi (Declared); it stays there until a server has room. 0/2 servers"
    )
    servers.append(room("c", 100))  # room appears: it moves there, make before break
    [moving] = decide(servers, [model("m", 40, placement=stays)]).values()
    assert (moving.server, moving.target, moving.reason) == ("a", "c", MOVING)


def test_a_model_that_moved_is_held_on_its_new_server_even_over_its_room_until_the_hold_ends() -> None:
    servers = [room("a", 30), room("b", 100)]
    moved = PlacementStatus(server="a", reason=PLACED, moved_at=ago(HOLD - 1))  # it measured larger since
    assert decide(servers, [model("m", 40, placement=moved)])["m"] == moved
    held_too_long = moved.model_copy(update={"moved_at": ago(HOLD)})
    assert decide(servers, [model("m", 40, placement=held_too_long)])["m"].target == "b"
    leaving = [room("a", 30, leaving=True), room("b", 100)]  # a hold never keeps it on a server that goes
    assert decide(leaving, [model("m", 40, placement=moved)])["m"].target == "b"


def test_the_same_statuses_read_again_decide_the_same_placements() -> None:
    """An operator restarted reads the placements back from the statuses: it places nothing differently."""
    servers = [room("a", 100), room("b", 100), room("c", 60)]
    models = [model(f"m{index}", mib) for index, mib in enumerate([50, 40, 30, 30, 20, 20, 10])]
    first = decide(servers, models)
    again = decide(servers, [model(seen.uid, seen.demand.memory_bytes // MiB, first[seen.uid]) for seen in models])
    assert again == first
    placed = {name: sum(m.demand.memory_bytes for m in models if first[m.uid].server == name) // MiB for name in "abc"}
    assert placed["a"] <= 100 and placed["b"] <= 100 and placed["c"] <= 60 and sum(placed.values()) == 200


def test_a_move_in_flight_keeps_its_target_while_the_target_still_holds_it() -> None:
    """The target counts as where it is: a second server coming along does not turn it around."""
    servers = [room("a", leaving=True), room("b", 50), room("c", 41)]
    moving = PlacementStatus(server="a", target="b", reason=MOVING)
    assert decide(servers, [model("m", placement=moving)])["m"].target == "b"
