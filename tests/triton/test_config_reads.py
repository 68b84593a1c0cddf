"""A replica's configs are read again only where an earlier read may no longer hold: after an action of
ours on the model, and for the tenth read longest ago each time (a model reloaded by hand is seen
within ten reads); a read that an action overtook keeps nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pytest

from tests.support.models import ADD_CONFIG, add_code, pod_triton
from tests.support.models import python_model as desired
from triton_operator.local.tritonserver import LocalTriton
from triton_operator.protocol.desired import DesiredModel
from triton_operator.triton.client import ControlClient, ModelState
from triton_operator.triton.sync import REREAD_SHARE, Replica
from triton_operator.triton.sync_plan import Action

KEY = "config-reads-key"
MODELS = [desired(f"add{index}", ADD_CONFIG, add_code(offset=index)) for index in range(REREAD_SHARE)]


class ConfigCountingClient(ControlClient):
    """Records the models whose config each read asks Triton for."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.config_reads: list[str] = []

    async def model_config(self, name: str) -> Any:
        self.config_reads.append(name)
        return await super().model_config(name)


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTriton]:
    with pod_triton(tmp_path_factory.mktemp("triton"), KEY) as server:
        yield server


@pytest.mark.triton
def test_unchanged_models_configs_are_read_a_tenth_a_pass_and_a_reload_by_hand_is_undone(triton: LocalTriton) -> None:
    async def run() -> None:
        async with ConfigCountingClient(triton.grpc_url, KEY) as client:
            replica = Replica(client)
            desired_models = {model.name: model for model in MODELS}
            report = await replica.sync(desired_models)
            assert report.ok and all(
                report.states[name].revision == desired_models[name].revision for name in report.states
            )

            reread: list[str] = []
            for _ in range(REREAD_SHARE):
                client.config_reads.clear()
                report = await replica.sync(desired_models, managed=desired_models)
                assert report.ok and not report.outcomes
                reread += client.config_reads
            assert sorted(reread) == sorted(desired_models)  # one a pass, each once, oldest first

            # Reloaded by hand at the same version with another config: no action of ours saw it.
            by_hand = desired(
                "add0", {**ADD_CONFIG, "instanceGroup": [{"kind": "KIND_CPU", "count": 2}]}, add_code(offset=0)
            )
            await client.load(by_hand)
            undone = None
            for attempt in range(REREAD_SHARE):
                report = await replica.sync(desired_models, managed=desired_models)
                if report.outcomes:
                    undone = attempt
                    break
            assert undone is not None, "the model reloaded by hand was never read again"
            assert [(outcome.action.kind, outcome.action.model, outcome.ok) for outcome in report.outcomes] == [
                ("reload", "add0", True)
            ]
            assert report.states["add0"].revision == desired_models["add0"].revision

    asyncio.run(run())


class HeldReadClient:
    """Stands in for a ControlClient: a read answers what was loaded when it began, once `answer` is set;
    loads take effect at once. Records what each read was told it may keep."""

    url = "held"

    def __init__(self) -> None:
        self.loaded: dict[str, str] = {}  # model -> revision
        self.answer = asyncio.Event()
        self.answer.set()
        self.known: list[set[str]] = []

    async def model_states(
        self, names: Iterable[str], known: Mapping[str, ModelState] | None = None
    ) -> dict[str, ModelState]:
        self.known.append(set(known or {}))
        loaded = dict(self.loaded)
        await self.answer.wait()
        return {
            name: ModelState(name, ready=name in loaded, revision=loaded.get(name, ""), version="1")
            for name in set(names) | set(loaded)
        }

    async def load(self, model: DesiredModel) -> None:
        self.loaded[model.name] = model.revision

    async def close(self) -> None:
        pass


def test_a_read_that_an_action_on_the_model_overtook_keeps_nothing_of_it() -> None:
    first = MODELS[-1]  # not the one read longest ago: that one is read again anyway
    second = desired(first.name, {**ADD_CONFIG, "instanceGroup": [{"kind": "KIND_CPU", "count": 2}]}, add_code())
    models = {model.name: model for model in MODELS}

    async def run() -> None:
        client = HeldReadClient()
        replica = Replica(client)  # type: ignore[arg-type]
        assert (await replica.sync(models)).ok
        assert (await replica.sync(models, managed=models)).ok
        assert first.name in client.known[-1]  # kept from the read before

        # A read begins with the first revision loaded; the reload of the second ends while it is unanswered.
        client.answer.clear()
        reading = asyncio.ensure_future(replica._read([first.name]))
        await asyncio.sleep(0)  # the read began
        replica._start([Action("reload", first.name)], {first.name: second}, None)
        await asyncio.wait(list(replica._in_flight.values()))
        client.answer.set()
        assert (await reading)[first.name].revision == first.revision  # what it saw when it began

        await replica._read([first.name])
        assert first.name not in client.known[-1]  # nothing kept from the overtaken read: its config is read

    asyncio.run(run())
