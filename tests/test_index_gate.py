"""kopf's gate before the first handlers (k8s/index_gate.py): the same gate, with one wake-up per waiter
instead of one per waiter and change; and the operator, started on a fleet that exists, still passes
each server only once every model is indexed."""

from __future__ import annotations

import asyncio
import copy

import kopf
import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._core.reactor import orchestration

from tests.support.operator import api_server, running_operator
from tests.support.resources import FILES, MODEL, SERVER
from triton_operator.k8s import index_gate
from triton_operator.k8s.handlers import register
from triton_operator.k8s.settings import Settings
from triton_operator.k8s.worker import ServerWorker

KOPFS_TOGGLE_SET = index_gate.ToggleSetWakingOnChange.__mro__[1]


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


async def test_an_operator_started_on_an_existing_fleet_passes_with_every_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass that saw a partial index would unload the models not indexed yet: every pass must see
    them all, the first one included."""
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
            await cluster.wait("the server's status", lambda: (cluster.get("TritonServer", "triton") or {}).get("status", {}).get("managedModels"))
            await operator.workers.get(("default", "triton")).next_pass()
    assert seen and set(seen) == {models}
