"""Loads and unloads side by side on a real tritonserver (nvidia-pytriton wheel, python backend, CPU):
a slow load holds up no other model's edit on its pod, and unloads run at once, within the bound."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.k8s.test_pod_sync import REPLICA_SET, Conditions, indexes_of
from tests.support.models import ADD_CONFIG, add_code, pod_triton
from tests.support.models import python_model as desired
from triton_operator.decide.seen import Pod
from triton_operator.k8s.pods.pod_sync import PodSync
from triton_operator.k8s.process.settings import Settings
from triton_operator.local.tritonserver import LocalTriton
from triton_operator.triton.client import ControlClient
from triton_operator.triton.sync import Replica

pytestmark = pytest.mark.triton

KEY = "concurrency-test-key"
SLOW_SECONDS = 20
EDIT_BOUND = 2.0


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTriton]:
    with pod_triton(tmp_path_factory.mktemp("triton"), KEY) as server:
        yield server


def test_an_edit_lands_while_a_slow_load_runs_on_the_same_pod(triton: LocalTriton) -> None:
    """Through the worker's pod sync: passes come one after another while a 20 s load runs, and an
    edit of another model is ready at its new revision within 2 s of the pass that carries it (or,
    on a machine so busy that the reload itself takes longer, within a second of its reload)."""
    slow = desired("slow", ADD_CONFIG, add_code(initialize=f"time.sleep({SLOW_SECONDS})"))
    fast = desired("fast", ADD_CONFIG, add_code())
    edited = desired("fast", {**ADD_CONFIG, "maxBatchSize": 4}, add_code())
    key = ("ml", "triton")
    pod = Pod(
        "triton-0", "uid-0", triton.grpc_url, deleting=False, models_ready=None, fingerprint="", owner=REPLICA_SET
    )
    indexes = indexes_of(key, [pod])

    async def scenario() -> None:
        woken = asyncio.Event()
        sync = PodSync(key, indexes, Conditions(), Settings(read_timeout_seconds=1), woken.set)  # type: ignore[arg-type]
        try:
            await sync.sync({"slow": slow, "fast": fast}, set(), set(), KEY)
            ready = lambda seen: seen.reports["triton-0"].states["fast"].ready  # noqa: E731
            await wait_for_pass(
                sync, {"slow": slow, "fast": fast}, ready, timeout=SLOW_SECONDS / 2
            )  # long before the slow load ends
            started = time.monotonic()
            landed = lambda seen: seen.reports["triton-0"].states["fast"].revision == edited.revision  # noqa: E731
            seen = await wait_for_pass(sync, {"slow": slow, "fast": edited}, landed, timeout=SLOW_SECONDS / 2)
            reload = next(o for o in seen.reports["triton-0"].outcomes if o.action.model == "fast")
            assert time.monotonic() - started <= max(EDIT_BOUND, reload.seconds + 1), reload
            assert not seen.reports["triton-0"].states["slow"].ready and "slow" in seen.reports["triton-0"].in_flight
            woken.clear()
            await asyncio.wait_for(woken.wait(), SLOW_SECONDS + 30)  # the slow load's end asks for a pass
            seen = await sync.sync({"slow": slow, "fast": edited}, {"slow", "fast"}, set(), KEY)
            assert seen.reports["triton-0"].states["slow"].ready and not seen.reports["triton-0"].in_flight
            seen = await sync.sync({}, set(), {"slow", "fast"}, KEY)  # leave the server empty for the next test
            assert not seen.reports["triton-0"].in_flight
        finally:
            await sync.close()

    asyncio.run(scenario())


async def wait_for_pass(sync: PodSync, models: dict[str, Any], done: Any, timeout: float = 30) -> Any:
    """Passes one after another, as the worker runs them while something changes, until `done(pass)`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = await sync.sync(models, set(), set(models), KEY)
        if "triton-0" in seen.reports and done(seen):
            return seen
    raise AssertionError("timed out waiting for the pass")


class CountingClient(ControlClient):
    """Counts the unloads running at once."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.running = self.most = 0

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await super().unload(name, unload_dependents)
        finally:
            self.running -= 1


def test_unloads_run_at_once_within_the_bound(triton: LocalTriton) -> None:
    models = {f"unload_{i}": desired(f"unload_{i}", ADD_CONFIG, add_code()) for i in range(6)}

    async def scenario() -> None:
        async with CountingClient(triton.grpc_url, KEY) as client:
            replica = Replica(client, parallel_loads=3)
            assert (await replica.sync(models)).ok
            report = await replica.sync({}, managed=set(models))
            assert [o.action.kind for o in report.outcomes] == ["unload"] * 6 and all(o.ok for o in report.outcomes)
            assert not any(state.ready for state in report.states.values())
            assert client.most == 3

    asyncio.run(scenario())
