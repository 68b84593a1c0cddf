"""kopf's gate before the first handlers (speed/index_gate.py): the same gate, with one wake-up per waiter
instead of one per waiter and change; kopf's own set kept, with a warning, on a kopf whose set changed;
and the operator, started on a fleet that exists, makes its gate of this set and still passes each
server only once every model is indexed."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable

import kopf
import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._core.reactor import orchestration

from tests.support.operator import api_server, running_operator
from tests.support.resources import FILES, MODEL, SERVER
from triton_operator.k8s.process.settings import Settings
from triton_operator.k8s.server.worker import ServerWorker
from triton_operator.k8s.watch.handlers import register
from triton_operator.speed import index_gate

KOPFS_TOGGLE_SET = index_gate.KOPFS_TOGGLE_SET


def counting(toggle_set: type[aiotoggles.ToggleSet]) -> type[aiotoggles.ToggleSet]:
    """The set, counting how often its state is read: once a wake-up of each waiter (and per change)."""

    class Counting(toggle_set):  # type: ignore[misc,valid-type]
        reads = 0

        def is_on(self) -> bool:
            type(self).reads += 1
            return super().is_on()

    return Counting


async def first_listing(toggle_set: type[aiotoggles.ToggleSet], objects: int) -> tuple[list[int], int]:
    """kopf's first listing: a blocker until every watcher has started, then per object a toggle made by
    the watcher and dropped by the object's task once indexed, which then waits for all. Returns how many
    objects were released before the last toggle went (must be none), and the set's state reads."""
    toggles = toggle_set(all)
    blocker = await toggles.make_toggle(name="orchestration blocker")
    released: list[int] = []
    early: list[int] = []

    async def indexed(index: int, toggle: aiotoggles.Toggle) -> None:
        await asyncio.sleep(0)
        await toggles.drop_toggle(toggle)
        await toggles.wait_for(True)
        released.append(index)

    tasks = []
    for index in range(objects):
        tasks.append(asyncio.create_task(indexed(index, await toggles.make_toggle(name=str(index)))))
        await asyncio.sleep(0)  # the watcher awaits the next event: the objects before start waiting
    for _ in range(5):
        await asyncio.sleep(0)
    early.extend(released)  # every object indexed, the blocker still held
    await toggles.drop_toggle(blocker)
    await asyncio.gather(*tasks)
    assert sorted(released) == list(range(objects))
    return early, toggles.reads  # type: ignore[attr-defined]


@pytest.mark.parametrize("objects", [100, 400])
async def test_the_gate_holds_every_object_and_wakes_each_once(objects: int) -> None:
    early, reads = await first_listing(counting(index_gate.ToggleSetWakingOnChange), objects)
    assert early == []
    assert reads <= 6 * objects + 10  # linear: a handful of reads per object, whatever the fleet


async def test_kopfs_own_set_wakes_every_waiter_on_every_change() -> None:
    """What the replacement is for: the same listing wakes kopf's set quadratically often."""
    early, reads = await first_listing(counting(KOPFS_TOGGLE_SET), 400)
    assert early == []
    assert reads > 400 * 400 / 4


async def test_a_toggle_turned_still_wakes_its_waiters() -> None:
    """kopf's pause is a set with `any`, waited on for off while its toggles turn on and off."""
    paused = index_gate.ToggleSetWakingOnChange(any)
    first, second = await paused.make_toggle(name="a"), await paused.make_toggle(name="b")
    await first.turn_to(True)
    await second.turn_to(True)
    resumed = asyncio.create_task(paused.wait_for(False))
    await first.turn_to(False)
    await asyncio.sleep(0)
    assert not resumed.done()
    await second.turn_to(False)
    await asyncio.wait_for(resumed, 5)
    await paused.drop_toggles([first, second])
    assert paused.is_on() is False


def test_registering_the_operator_puts_the_set_where_kopf_makes_its_gate() -> None:
    register(kopf.OperatorRegistry(), Settings(metrics_port=0, liveness_port=0))
    assert orchestration.aiotoggles.ToggleSet is index_gate.ToggleSetWakingOnChange


def test_the_kopf_installed_is_the_kopf_the_set_was_written_for() -> None:
    """On a kopf whose set changed this fails, naming what changed: check the replacement against it."""
    assert index_gate.changes_in_kopf(KOPFS_TOGGLE_SET, aiotoggles.Toggle) == []


async def _waiting_on_an_event(self: aiotoggles.ToggleSet, __state: bool) -> None:
    await self._event.wait()  # type: ignore[attr-defined]


def _keeping_toggles_in_a_dict(self: aiotoggles.ToggleSet, fn: Callable[..., bool]) -> None:
    self._condition, self._toggles, self._fn = asyncio.Condition(), {}, fn  # type: ignore[assignment]


def _toggle_of_its_own_condition(self: aiotoggles.Toggle, __state: bool = False, *, name: str | None = None) -> None:
    self._condition, self._state, self._name = asyncio.Condition(), __state, name


async def _dropping_with_a_reason(self: aiotoggles.ToggleSet, toggle: aiotoggles.Toggle, reason: str) -> None:
    pass


CHANGED_KOPFS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], str]] = {
    "a method added": (
        lambda patch: patch.setattr(KOPFS_TOGGLE_SET, "make_toggles", _dropping_with_a_reason, raising=False),
        "new method make_toggles",
    ),
    "a method gone": (lambda patch: patch.delattr(KOPFS_TOGGLE_SET, "drop_toggles"), "no method drop_toggles"),
    "an overridden method called otherwise": (
        lambda patch: patch.setattr(KOPFS_TOGGLE_SET, "drop_toggle", _dropping_with_a_reason),
        "drop_toggle takes other parameters",
    ),
    "waiters waiting elsewhere": (
        lambda patch: patch.setattr(KOPFS_TOGGLE_SET, "wait_for", _waiting_on_an_event),
        "wait_for no longer reads _condition, is_on",
    ),
    "toggles kept otherwise": (
        lambda patch: patch.setattr(KOPFS_TOGGLE_SET, "__init__", _keeping_toggles_in_a_dict),
        "no set _toggles",
    ),
    "toggles of their own condition": (
        lambda patch: patch.setattr(aiotoggles.Toggle, "__init__", _toggle_of_its_own_condition),
        "Toggle does not wait",
    ),
}


@pytest.mark.parametrize("change, named", CHANGED_KOPFS.values(), ids=CHANGED_KOPFS.keys())
def test_on_a_changed_kopf_its_own_set_stays_with_a_warning_naming_the_change(
    change: Callable[[pytest.MonkeyPatch], None],
    named: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Fail static: kopf's own set is the same gate, only slower; the replacement on a set that changed
    could leave the waiters asleep."""
    monkeypatch.setattr(aiotoggles, "ToggleSet", index_gate.ToggleSetWakingOnChange)  # installed before
    change(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="triton_operator"):
        index_gate.install()
    assert aiotoggles.ToggleSet is KOPFS_TOGGLE_SET
    assert [
        record
        for record in caplog.records
        if named in record.getMessage() and "kopf's own gate stays" in record.getMessage()
    ]


async def test_an_operator_started_on_an_existing_fleet_passes_with_every_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pass that saw a partial index would unload the models not indexed yet: every pass must see
    them all, the first one included. kopf made its gate (`all`) and its pause (`any`) of the set
    installed: a kopf that made them otherwise would run with its own, silently slow."""
    made: list[Callable[..., bool]] = []

    def recording(self: index_gate.ToggleSetWakingOnChange, fn: Callable[..., bool]) -> None:
        made.append(fn)
        KOPFS_TOGGLE_SET.__init__(self, fn)

    monkeypatch.setattr(index_gate.ToggleSetWakingOnChange, "__init__", recording)
    seen: list[int] = []
    reconcile = ServerWorker.reconcile

    async def counted(self: ServerWorker) -> bool:
        seen.append(len(self.indexes.models_of(self.key)))
        return await reconcile(self)

    monkeypatch.setattr(ServerWorker, "reconcile", counted)
    models = 60
    async with api_server() as cluster:
        for obj in (SERVER, FILES):
            await cluster.create(copy.deepcopy(obj))
        for index in range(models):
            model = copy.deepcopy(MODEL)
            model["metadata"]["name"] = f"add-{index}"
            await cluster.create(model)
        async with running_operator(cluster) as operator:
            await cluster.wait(
                "the server's status",
                lambda: (cluster.get("TritonServer", "triton") or {}).get("status", {}).get("managedModels"),
            )
            await operator.workers.get(("default", "triton")).next_pass()
    assert seen and set(seen) == {models}
    assert all in made and any in made
