"""The operator's collector: survivors of a full collection frozen, so the next walks only what is new."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from triton_operator.k8s.process import metrics
from triton_operator.k8s.process import run as k8s_run
from triton_operator.k8s.process.settings import Settings
from triton_operator.speed import collector


class Kept:
    """A tracked object standing for something the operator keeps (a parse, a rendering)."""


@pytest.fixture
def thawed() -> Iterator[None]:
    """This test's freezes undone after it (the test process's collector is left as it was found)."""
    frozen_before = gc.get_freeze_count()
    yield
    if frozen_before == 0:
        gc.unfreeze()


def _walked_by_a_collection(obj: object) -> bool:
    return any(item is obj for item in gc.get_objects())


def _full_collections() -> float:
    return metrics.REGISTRY.get_sample_value("triton_operator_gc_collection_seconds_count", {"generation": "2"}) or 0.0


def test_a_full_collection_freezes_its_survivors_and_the_next_walks_only_what_came_after(thawed: None) -> None:
    with collector.freezing_survivors(metrics.observe_collection):
        kept = Kept()
        assert _walked_by_a_collection(kept)
        counted = _full_collections()
        gc.collect()
        assert not _walked_by_a_collection(kept), "a survivor of the full collection is still walked by the next"
        assert _full_collections() == counted + 1
        newer = Kept()
        assert _walked_by_a_collection(newer)
    gc.collect()
    assert _walked_by_a_collection(newer), "outside freezing_survivors a full collection froze what survived it"


def _on_free(obj: object) -> list[bool]:
    """A flag set once `obj` is freed."""
    freed: list[bool] = []
    weakref.finalize(obj, freed.append, True)
    return freed


def test_a_frozen_object_is_still_freed_when_its_last_reference_goes(thawed: None) -> None:
    with collector.freezing_survivors(metrics.observe_collection):
        kept = Kept()
        gc.collect()
        freed = _on_free(kept)
        del kept
        assert freed


def test_cycles_frozen_objects_died_in_are_freed_once_the_frozen_objects_grew_past_the_bound(thawed: None) -> None:
    with collector.freezing_survivors(metrics.observe_collection, growth=1.1):
        gc.collect()  # the first full collection sets the bound from what it froze
        cycle = Kept()
        cycle.itself = cycle  # type: ignore[attr-defined]
        gc.collect()
        freed = _on_free(cycle)
        del cycle
        gc.collect()
        assert not freed, "a cycle among frozen objects was freed while the frozen objects were under the bound"
        grown = [[index] for index in range(gc.get_freeze_count() // 5)]
        gc.collect()  # the frozen objects now past the bound: thawed
        assert not freed and _walked_by_a_collection(grown)
        gc.collect()  # walks the whole heap
        assert freed
        assert not _walked_by_a_collection(grown), "the survivors of the whole walk are not frozen again"


def test_run_freezes_survivors_while_the_operator_runs_and_no_longer_once_it_returned(
    monkeypatch: pytest.MonkeyPatch, thawed: None
) -> None:
    during: list[bool] = []

    async def operator(**_: Any) -> None:
        kept = Kept()
        gc.collect()
        during.append(_walked_by_a_collection(kept))

    monkeypatch.setattr(k8s_run, "credentials_missing", lambda: "")
    monkeypatch.setattr(k8s_run.kopf, "operator", operator)
    assert k8s_run.run(clusterwide=True, namespaces=[], settings=Settings(metrics_port=0, liveness_port=0)) == 0
    assert during == [False]
    after = Kept()
    gc.collect()
    assert _walked_by_a_collection(after)
