"""Python's full collections kept to what is new: whatever survives one is frozen.

A full collection (generation 2) walks every tracked object of the process, and nothing else runs
meanwhile. The operator keeps tens of tracked objects a model (its parse, rendering, index entry,
written status), so at 10,000 models one walk is long enough to show in an edit's time to its load call,
which waits for it (bench/RESULTS.md, "Measurements behind the design"). What survives a full collection
is what the operator keeps for long; gc.freeze() moves it to the permanent generation, which no
collection walks, so the next one walks only what was made since the last.

A frozen object is still freed when its last reference goes, but one that dies inside a reference
cycle is not: kopf's per-event objects are such cycles, and those alive at a full collection are
frozen (measured: tens of objects an edit, bench/RESULTS.md, "Measurements behind the design"). So
the frozen objects are bounded: once they may have reached GROWTH times those that survived the last
walk of the whole heap, they are counted; if they have, they are thawed, and the next full collection
walks the whole heap once, frees those cycles and sets the bound again. That walk comes once the frozen
objects grew by half, not per edit.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator
from typing import Any

FULL = 2
GROWTH = 1.5


class _FreezeSurvivors:
    """The gc callback: tells `observe` each collection's generation and pause; freezes after a full one,
    and thaws once the frozen objects reach `growth` times the survivors of the last whole-heap walk."""

    def __init__(self, growth: float, observe: Callable[[int, float], None]) -> None:
        self.growth = growth
        self.observe = observe
        self.started = 0.0
        self.limit = 0  # frozen objects allowed before thawing; 0: set by the next full collection
        self.frozen_at_most = 0  # an upper bound on the frozen objects: counted ones plus all since frozen

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
            return
        self.observe(info["generation"], time.perf_counter() - self.started)
        if info["generation"] == FULL:
            self._after_full_collection()

    def _after_full_collection(self) -> None:
        if not self.limit:  # the first, or the one after a thaw (it walked the whole heap): its survivors set the bound
            gc.freeze()
            self.frozen_at_most = gc.get_freeze_count()
            self.limit = int(self.growth * self.frozen_at_most)
            return
        self.frozen_at_most += len(gc.get_objects(FULL))  # what this collection walked and kept
        gc.freeze()
        if self.frozen_at_most > self.limit:
            self.frozen_at_most = gc.get_freeze_count()  # one walk of the frozen list, once per half a heap
            if self.frozen_at_most > self.limit:
                gc.unfreeze()
                self.limit = 0


@contextlib.contextmanager
def freezing_survivors(
    observe: Callable[[int, float], None] = lambda generation, seconds: None, growth: float = GROWTH
) -> Iterator[None]:
    """While inside, every full collection's survivors are frozen (the process's collector: `run` only);
    `observe` is told each collection's generation and how long it held the process."""
    callback = _FreezeSurvivors(growth, observe)
    gc.callbacks.append(callback)
    try:
        yield
    finally:
        gc.callbacks.remove(callback)
