"""kopf's gate before the first handlers, made to wake each waiting object once instead of once a change.

kopf holds every object's handlers until all of the operator's indexes are filled: each object
being indexed holds a toggle in one set (a ToggleSet with `all`), and each object already indexed
waits on that set's condition for "all on". kopf's set wakes every waiter whenever a toggle is added
or dropped, so the first listing costs (objects waiting) x (toggles added and dropped) wake-ups:
quadratic in the objects listed. With 10,000 TritonModels and their config ConfigMaps the operator
spent its first twenty minutes there (bench/RESULTS.md), at start and after every failover, before
a single model was served a change.

A waiter's condition reads only the set's aggregate state (`is_on`), and adding or dropping a toggle
turns no toggle on or off; so waking the waiters only when adding or dropping changed the aggregate is
the same gate: each waiter wakes once, when the last object is indexed. A toggle turned on or off
still wakes everyone, as in kopf. kopf makes its sets through the module attribute; `install` points
it at this class before the operator starts. It reads kopf's internals (the set's condition and
toggles), so kopf is pinned to the minor version tests/test_index_gate.py ran against.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable

from kopf._cogs.aiokits import aiotoggles


class ToggleSetWakingOnChange(aiotoggles.ToggleSet):
    """kopf's ToggleSet whose toggles, added or dropped, wake the waiters only if `is_on` changed."""

    async def make_toggle(self, __val: bool = False, *, name: str | None = None) -> aiotoggles.Toggle:
        toggle = aiotoggles.Toggle(__val, name=name, condition=self._condition)
        async with self._changing():
            self._toggles.add(toggle)
        return toggle

    async def drop_toggle(self, toggle: aiotoggles.Toggle) -> None:
        async with self._changing():
            self._toggles.discard(toggle)

    async def drop_toggles(self, toggles: Iterable[aiotoggles.Toggle]) -> None:
        async with self._changing():
            self._toggles.difference_update(toggles)

    @contextlib.asynccontextmanager
    async def _changing(self) -> AsyncIterator[None]:
        async with self._condition:
            was_on = self.is_on()
            yield
            if self.is_on() != was_on:
                self._condition.notify_all()


def install() -> None:
    """Every ToggleSet kopf makes from now on wakes its waiters on a change of state only."""
    aiotoggles.ToggleSet = ToggleSetWakingOnChange  # type: ignore[misc]
