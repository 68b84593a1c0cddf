"""The control client's retries, timeouts and concurrent state reads, the bound on replicas synced at
once, and which models a sync reads again."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from tests.support.models import ADD_CONFIG, add_code, python_model
from tests.support.ports import free_ports
from triton_operator.protocol.desired import DesiredModel, load_request_json
from triton_operator.protocol.names import RESTART_PARAMETER, REVISION_PARAMETER
from triton_operator.triton.client import ControlClient, ControlError, ModelState, Timeouts
from triton_operator.triton.sync import Replica, ReplicaReport


class FlakyTriton:
    """Stands in for tritonclient's aio client: fails `failures` times with `status`, then answers."""

    def __init__(self, failures: int, status: str):
        self.failures = failures
        self.status = status
        self.calls = 0

    async def unload_model(self, name: str, **kwargs: Any) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise InferenceServerException(f"Triton says no ({self.status})", status=f"StatusCode.{self.status}")

    async def close(self) -> None:
        pass


def unload_through(fake: FlakyTriton, retries: int = 3) -> None:
    async def run() -> None:
        client = ControlClient("127.0.0.1:1", retries=retries, backoff_seconds=0.01)
        await client.close()
        client._client = fake  # the transport is Triton's; what is tested here is the retry policy
        await client.unload("m")

    asyncio.run(run())


class RecordingTriton:
    """Stands in for tritonclient's aio client: keeps each load request as it would go on the wire."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, bytes] | None]] = []

    async def load_model(self, name: str, config: str, files: dict[str, bytes] | None = None, **kwargs: Any) -> None:
        self.requests.append((name, config, files))

    async def close(self) -> None:
        pass


def test_a_load_sends_the_model_s_config_printed_from_its_message_and_a_heal_that_with_the_restart_set() -> None:
    code = add_code()
    model = python_model("m", ADD_CONFIG, code)
    fake = RecordingTriton()

    async def run() -> None:
        client = ControlClient("127.0.0.1:1")
        await client.close()
        client._client = fake  # the transport is Triton's; what is tested here is what goes to it
        await client.load(model)
        await client.load(model.restarted(2))

    asyncio.run(run())
    (name, sent, files), (healed_name, healed, healed_files) = fake.requests
    assert (name, files) == (healed_name, healed_files) == ("m", {"file:1/model.py": code})
    assert sent == load_request_json(model.parsed_config())
    restarted = json.loads(healed)
    assert restarted["parameters"].pop(RESTART_PARAMETER) == {"string_value": "2"}
    assert restarted == json.loads(sent)


def test_transient_failures_are_retried_with_backoff() -> None:
    fake = FlakyTriton(failures=2, status="UNAVAILABLE")
    unload_through(fake)
    assert fake.calls == 3


def test_retries_are_bounded_and_the_error_keeps_tritons_words() -> None:
    fake = FlakyTriton(failures=10, status="UNAVAILABLE")
    with pytest.raises(ControlError) as raised:
        unload_through(fake, retries=2)
    assert fake.calls == 3 and raised.value.transient and "Triton says no" in raised.value.message


def test_a_rejection_is_not_retried() -> None:
    fake = FlakyTriton(failures=1, status="INVALID_ARGUMENT")
    with pytest.raises(ControlError) as raised:
        unload_through(fake)
    assert fake.calls == 1 and not raised.value.transient


def test_an_unreachable_replica_is_reported_not_raised() -> None:
    [port] = free_ports(1)

    async def run() -> ReplicaReport:
        async with ControlClient(
            f"127.0.0.1:{port}", timeouts=Timeouts(read_seconds=1), retries=1, backoff_seconds=0.01
        ) as client:
            assert not await client.live()
            return await Replica(client).sync({})

    report = asyncio.run(run())
    assert report.error and not report.ok


class ManyModelsTriton:
    """Stands in for tritonclient's aio client with `count` ready models; counts model reads in flight."""

    def __init__(self, count: int):
        self.names = [f"m{index:02d}" for index in range(count)]
        self.in_flight = 0
        self.most_in_flight = 0

    async def get_model_repository_index(self, **kwargs: Any) -> Any:
        return service_pb2.RepositoryIndexResponse()

    async def get_inference_statistics(self, name: str, **kwargs: Any) -> Any:
        stats = [
            service_pb2.ModelStatistics(name=model, version=version) for model in self.names for version in ("1", "2")
        ]
        return service_pb2.ModelStatisticsResponse(model_stats=stats)

    async def get_model_config(self, name: str, **kwargs: Any) -> Any:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.005)  # a round trip, so reads overlap when they may
        self.in_flight -= 1
        response = service_pb2.ModelConfigResponse()
        response.config.name = name
        response.config.parameters[REVISION_PARAMETER].string_value = f"rev-{name}"
        return response

    async def close(self) -> None:
        pass


def test_model_states_are_read_concurrently_within_the_bound() -> None:
    fake = ManyModelsTriton(20)

    async def run() -> dict[str, Any]:
        client = ControlClient("127.0.0.1:1", parallel_reads=4)
        await client.close()
        client._client = fake  # the transport is Triton's; what is tested here is how reads are spread
        return await client.model_states([*fake.names, "not-loaded"])

    states = asyncio.run(run())
    assert sorted(states) == [*fake.names, "not-loaded"] and not states["not-loaded"].ready
    assert all(
        states[name].ready and states[name].revision == f"rev-{name}" and states[name].version == "2"
        for name in fake.names
    )
    assert fake.most_in_flight == 4


class RecordingClient:
    """Stands in for a ControlClient: answers from `states`, records which models each read asks about."""

    url = "recorded"

    def __init__(self, states: dict[str, ModelState]):
        self.states = states
        self.asked: list[set[str]] = []

    async def model_states(self, names: Any, known: Any = None) -> dict[str, ModelState]:
        self.asked.append(set(names))
        return {name: self.states.get(name, ModelState(name, ready=False)) for name in set(names)}

    async def load(self, model: DesiredModel) -> None:
        self.states[model.name] = ModelState(model.name, ready=True, revision=model.revision)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        self.states.pop(name)


def test_after_a_sync_only_the_models_it_changed_are_read_again() -> None:
    desired = {name: DesiredModel(name, "new" if name == "b" else "same", b"") for name in ("a", "b", "c")}
    client = RecordingClient(
        {name: ModelState(name, ready=True, revision="old" if name == "b" else "same") for name in desired}
    )
    report = asyncio.run(Replica(client).sync(desired))  # type: ignore[arg-type]
    assert client.asked == [{"a", "b", "c"}, {"b"}]
    assert report.states["b"].revision == "new" and report.states["a"].revision == "same"


def test_an_ensemble_unloaded_with_its_steps_has_its_steps_read_again() -> None:
    ensemble = ModelState("pipeline", ready=True, revision="r", composing=("pre", "post"))
    client = RecordingClient(
        {"pipeline": ensemble, "pre": ModelState("pre", True, "r"), "post": ModelState("post", True, "r")}
    )
    asyncio.run(Replica(client).sync({}, managed={"pipeline"}))  # type: ignore[arg-type]
    assert client.asked[-1] == {"pipeline", "pre", "post"}
