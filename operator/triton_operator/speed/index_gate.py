"""kopf's gate before the first handlers, made to wake each waiting object once instead of once a change.

kopf holds every object's handlers until all of the operator's indexes are filled: each object
being indexed holds a toggle in one set (a ToggleSet with `all`), and each object already indexed
waits on that set's condition for "all on". kopf's set wakes every waiter whenever a toggle is added
or dropped, so the first listing costs (objects waiting) x (toggles added and dropped) wake-ups:
quadratic in the objects listed: at 10,000 TritonModels those wake-ups are most of the time from a start
(or a failover) to every status (bench/RESULTS.md).

A waiter's condition reads only the set's aggregate state (`is_on`), and adding or dropping a toggle
turns no toggle on or off; so waking the waiters only when adding or dropping changed the aggregate is
the same gate: each waiter wakes once, when the last object is indexed. A toggle turned on or off
still wakes everyone, as in kopf.

kopf has no hook for this set: its orchestrator makes it from the module attribute
`aiotoggles.ToggleSet` (kopf 1.45.2, the newest release, and kopf's main branch of June 2026 alike), so
`install` points that attribute at this class before the operator starts. The class reads kopf's
internals; `install` first checks the ones it relies on and, on a kopf where they changed, keeps
kopf's own class with a warning: the same gate, only the slow start back. tests/speed/test_index_gate.py
fails on such a kopf, naming what changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import types
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import kopf
from kopf._cogs.aiokits import aiotoggles

logger = logging.getLogger(__name__)

KOPFS_TOGGLE_SET = aiotoggles.ToggleSet  # kept: the fallback once `install` replaced the attribute
# Every method of kopf's set: a new one could add or drop toggles past the overrides, waking no one.
KOPFS_METHODS = frozenset(
    {
        "__init__",
        "__repr__",
        "__len__",
        "__iter__",
        "__contains__",
        "__bool__",
        "is_on",
        "is_off",
        "wait_for",
        "make_toggle",
        "drop_toggle",
        "drop_toggles",
    }
)
# kopf's methods kept as they are, and what their code must read for the overrides to wake them.
KOPFS_READS = {"wait_for": {"_condition", "is_on"}, "is_on": {"_toggles"}}


class ToggleSetWakingOnChange(KOPFS_TOGGLE_SET):
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


def changes_in_kopf(toggle_set: type, toggle: type) -> list[str]:
    """What kopf's ToggleSet and Toggle no longer do as ToggleSetWakingOnChange relies on; empty if nothing."""
    methods = {name: value for name, value in vars(toggle_set).items() if inspect.isfunction(value)}
    changes = [f"ToggleSet has a new method {name}" for name in sorted(methods.keys() - KOPFS_METHODS)]
    changes += [f"ToggleSet has no method {name}" for name in sorted(KOPFS_METHODS - methods.keys())]
    changes += [
        f"ToggleSet.{name} takes other parameters"
        for name in ("make_toggle", "drop_toggle", "drop_toggles")
        if name in methods and _parameters(methods[name]) != _parameters(getattr(ToggleSetWakingOnChange, name))
    ]
    changes += [
        f"ToggleSet.{name} no longer reads {', '.join(sorted(reads - _names_read(methods[name])))}"
        for name, reads in KOPFS_READS.items()
        if name in methods and not reads <= _names_read(methods[name])
    ]
    probe = toggle_set(all)
    condition, toggles = getattr(probe, "_condition", None), getattr(probe, "_toggles", None)
    if not isinstance(condition, asyncio.Condition) or not isinstance(toggles, set):
        return [*changes, "a ToggleSet keeps no set _toggles and condition _condition"]
    try:
        shared = toggle(False, name="probe", condition=condition)._condition is condition
    except TypeError:
        shared = False
    return changes if shared else [*changes, "a Toggle does not wait on the condition it is given"]


def _parameters(method: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    """How a method is called: each parameter's name (without its class's mangling), kind and default."""
    return [(p.name.rpartition("__")[2], p.kind, p.default) for p in inspect.signature(method).parameters.values()]


def _names_read(function: Callable[..., Any]) -> set[str]:
    """The attribute and global names a function's code reads, its nested functions' included."""
    names: set[str] = set()
    codes = [function.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    return names


def install() -> None:
    """Every ToggleSet kopf makes from now on wakes its waiters on a change of state only; on a kopf whose
    set changed, kopf's own stays (the operator runs, its first listing quadratic again)."""
    changes = changes_in_kopf(KOPFS_TOGGLE_SET, aiotoggles.Toggle)
    if changes:
        logger.warning(
            "kopf %s changed what triton_operator.speed.index_gate replaces (%s): kopf's own gate stays, "
            "so a start wakes every indexed object on every object indexed (about 20 minutes at 10,000 TritonModels)",
            kopf.__version__,  # type: ignore[attr-defined]  # kopf imports it but leaves it out of its __all__
            "; ".join(changes),
        )
    aiotoggles.ToggleSet = KOPFS_TOGGLE_SET if changes else ToggleSetWakingOnChange  # type: ignore[misc]
