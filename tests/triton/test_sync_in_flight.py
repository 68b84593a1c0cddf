"""A Replica's actions in flight, against a stand-in for Triton's control API: loads outlive the sync
that started them, no model gets a second action while one runs, unloads run side by side within the
bound, and a load an earlier operator started is waited for."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

from triton_operator.protocol.desired import DesiredModel
from triton_operator.triton.client import ModelState
from triton_operator.triton.sync import Replica


def desired(name: str, revision: str = "r1", composing: frozenset[str] = frozenset()) -> DesiredModel:
    return DesiredModel(name=name, revision=revision, serialized_config=b"", composing=composing)


class Triton:
    """Holds models (name -> revision), loads them when their gate opens, and counts what runs at once."""

    def __init__(
        self,
        loaded: Mapping[str, str] = (),
        known: Iterable[str] = (),
        composing: Mapping[str, tuple[str, ...]] | None = None,
    ):
        self.url = "triton:8001"
        self.loaded = dict(loaded)
        self.known_models = set(known) | set(self.loaded)
        self.composing = dict(composing or {})
        self.gates: dict[str, asyncio.Event] = {}  # a load waits for its model's gate, when it has one
        self.calls: list[str] = []
        self.running = self.most = 0
        self.started = asyncio.Event()  # set whenever a call starts

    async def at_once(self, count: int) -> None:
        """Until `count` calls run at once."""
        while self.running < count:
            self.started.clear()
            await self.started.wait()

    async def model_states(
        self, names: Iterable[str], known: Mapping[str, ModelState] | None = None
    ) -> dict[str, ModelState]:
        names = set(names) | set(self.loaded)
        return {
            name: ModelState(
                name,
                ready=name in self.loaded,
                revision=self.loaded.get(name, ""),
                composing=self.composing.get(name, ()),
            )
            for name in names
        }

    async def load(self, model: DesiredModel) -> None:
        self.calls.append(f"load {model.name}")
        self.known_models.add(model.name)
        await self._busy(self.gates.get(model.name))
        self.loaded[model.name] = model.revision

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        self.calls.append(f"unload {name}")
        await self._busy(self.gates.get(name))
        for gone in (name, *(self.composing.get(name, ()) if unload_dependents else ())):
            self.loaded.pop(gone, None)
        self.calls.append(f"unloaded {name}")

    async def _busy(self, gate: asyncio.Event | None) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        self.started.set()
        try:
            await (gate.wait() if gate else asyncio.sleep(0))
        finally:
            self.running -= 1

    async def ready(self, name: str) -> bool:
        return name in self.loaded

    async def known(self, name: str) -> bool:
        return name in self.known_models

    async def close(self) -> None:
        pass


def replica_of(triton: Triton, **kwargs: object) -> Replica:
    return Replica(triton, **kwargs)  # type: ignore[arg-type]


def test_a_slow_load_holds_up_no_other_model() -> None:
    async def scenario() -> None:
        triton = Triton(loaded={"fast": "r1"})
        triton.gates["slow"] = asyncio.Event()
        ended = asyncio.Event()
        wanted = {"fast": desired("fast"), "slow": desired("slow")}
        replica = replica_of(triton, on_ended=ended.set)

        first = await asyncio.wait_for(replica.sync(wanted, settle_seconds=0.05), 5)
        assert first.in_flight == {"slow"} and not first.states["slow"].ready and first.outcomes == []

        edited = {**wanted, "fast": desired("fast", "r2")}
        second = await asyncio.wait_for(replica.sync(edited, settle_seconds=1), 5)
        assert second.states["fast"].revision == "r2" and second.in_flight == {"slow"}
        assert triton.calls == ["load slow", "load fast"]  # the loading model got no second load
        assert not ended.is_set()  # the reload ended while its sync waited: that sync reported it

        triton.gates["slow"].set()
        await asyncio.wait_for(ended.wait(), 5)  # the slow load's end asks for another sync
        third = await replica.sync(edited, settle_seconds=1)
        assert (
            third.states["slow"].ready and [o.action.model for o in third.outcomes] == ["slow"] and not third.in_flight
        )

    asyncio.run(scenario())


def test_a_revision_that_moves_on_mid_load_is_loaded_after_it() -> None:
    async def scenario() -> None:
        triton = Triton()
        triton.gates["m"] = asyncio.Event()
        replica = replica_of(triton, on_ended=lambda: None)
        await replica.sync({"m": desired("m")}, settle_seconds=0.05)
        report = await replica.sync({"m": desired("m", "r2")}, settle_seconds=0.05)
        assert report.in_flight == {"m"} and triton.calls == ["load m"]
        triton.gates["m"].set()
        await asyncio.wait_for(asyncio.gather(*replica._in_flight.values()), 5)
        report = await replica.sync({"m": desired("m", "r2")})
        assert triton.calls == ["load m", "load m"] and report.states["m"].revision == "r2"

    asyncio.run(scenario())


def test_unloads_run_side_by_side_within_the_bound_ensembles_first() -> None:
    async def scenario() -> None:
        steps = {"pipeline": ("step",)}
        triton = Triton(
            loaded={**{f"m{i}": "r1" for i in range(6)}, "pipeline": "r1", "step": "r1", "lone": "r1"}, composing=steps
        )
        for name in [f"m{i}" for i in range(6)]:
            triton.gates[name] = asyncio.Event()
        replica = replica_of(triton, parallel_loads=3)
        managed = set(triton.loaded)
        syncing = asyncio.ensure_future(replica.sync({"step": desired("step")}, managed=managed - {"step"}))
        await asyncio.wait_for(triton.at_once(3), 5)
        assert triton.most == 3  # bound reached, not passed
        for gate in triton.gates.values():
            gate.set()
        report = await asyncio.wait_for(syncing, 5)
        assert triton.most == 3 and not report.in_flight
        assert set(triton.loaded) == {"step"}
        assert triton.calls.index("unloaded pipeline") < triton.calls.index(
            "unload lone"
        )  # steps' unloads wait for the ensemble's

    asyncio.run(scenario())


def test_a_load_an_earlier_operator_started_is_waited_for_not_sent_again() -> None:
    async def scenario() -> None:
        triton = Triton(known={"loading"})  # Triton heard of it: its load runs (or failed, or it was unloaded)
        ended = asyncio.Event()
        wanted = {"loading": desired("loading"), "new": desired("new")}
        replica = replica_of(triton, on_ended=ended.set)
        report = await replica.sync(wanted, managed={"loading"}, settle_seconds=0.05)
        assert triton.calls == ["load new"] and "loading" in report.in_flight
        triton.loaded["loading"] = "r1"  # the earlier operator's load ends
        await asyncio.wait_for(ended.wait(), 5)
        report = await replica.sync(wanted, managed={"loading", "new"})
        assert triton.calls == ["load new"] and report.states["loading"].ready and not report.in_flight

    asyncio.run(scenario())


def test_a_load_an_earlier_operator_started_is_sent_once_the_wait_ends() -> None:
    async def scenario() -> None:
        triton = Triton(known={"failed"})  # it failed before the restart: it never turns ready
        replica = replica_of(triton, adopt_seconds=0.05, on_ended=lambda: None)
        await replica.sync({"failed": desired("failed")}, managed={"failed"})
        assert triton.calls == []
        report = await replica.sync({"failed": desired("failed")}, managed={"failed"})
        assert triton.calls == ["load failed"] and report.states["failed"].ready

    asyncio.run(scenario())
