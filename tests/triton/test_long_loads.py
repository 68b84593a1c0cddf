"""Loads longer than a gRPC connection's max age: the control client follows a load whose call was cut
instead of sending it again, and a model's spec.loadTimeoutSeconds bounds its load."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from tests.support.models import ADD_CONFIG, add_code, pod_triton
from tests.support.models import python_model as desired
from tests.support.resources import FILES, MODEL, SERVER, model_document
from triton_operator.api.resources import TritonModel, TritonServer
from triton_operator.local.tritonserver import LocalTriton
from triton_operator.protocol.desired import DesiredModel
from triton_operator.protocol.names import REVISION_PARAMETER
from triton_operator.protocol.triton_proto import model_config_pb2
from triton_operator.render.model_rendering import render_model
from triton_operator.triton.client import ControlClient, ControlError
from triton_operator.triton.load_answers import LoadProgress, LoadSeen, load_progress
from triton_operator.triton.sync import Replica

KEY = "long-loads-key"
CUT = "enter idle"  # gRPC's words when the connection's max age and grace cut a call (measured)
REFUSED = "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Connection refused"


@pytest.mark.parametrize(
    ("seen", "expected"),
    [
        (LoadSeen(revision="new", known=True), LoadProgress.LOADED),
        (LoadSeen(revision="old", known=True), LoadProgress.LOADING),  # a reload: the old revision serves meanwhile
        (LoadSeen(revision=None, known=True), LoadProgress.LOADING),  # "has no available versions"
        (LoadSeen(revision=None, known=False), LoadProgress.LOST),  # "is not found": Triton restarted, or never got it
        (LoadSeen(None, True, "LOADING"), LoadProgress.LOADING),
        (LoadSeen(None, True, "UNAVAILABLE", "Internal: RuntimeError: broken"), LoadProgress.FAILED),
        (LoadSeen(None, False, "UNAVAILABLE", ""), LoadProgress.LOST),  # in the repository, never loaded
        (LoadSeen("new", True, "READY"), LoadProgress.LOADED),
    ],
)
def test_where_a_cut_load_stands(seen: LoadSeen, expected: LoadProgress) -> None:
    assert load_progress(seen, "new") == expected


class CutTriton:
    """Stands in for tritonclient's aio client: each load call fails with `load_failures` in turn, and the
    model reads as `looks` says, one entry a look (the last one stays)."""

    def __init__(self, load_failures: list[str], looks: list[str]):
        self.load_failures = load_failures
        self.looks = looks
        self.loads = 0

    async def load_model(self, name: str, **kwargs: Any) -> None:
        self.loads += 1
        if self.loads <= len(self.load_failures):
            raise InferenceServerException(self.load_failures[self.loads - 1], status="StatusCode.UNAVAILABLE")

    async def get_model_config(self, name: str, **kwargs: Any) -> Any:
        look = self.looks.pop(0) if len(self.looks) > 1 else self.looks[0]
        if look.startswith("rev:"):
            response = service_pb2.ModelConfigResponse()
            response.config.parameters[REVISION_PARAMETER].string_value = look.removeprefix("rev:")
            return response
        raise InferenceServerException(f"Request for unknown model: '{name}' {look}", status="StatusCode.NOT_FOUND")

    async def close(self) -> None:
        pass


def load_through(fake: CutTriton, timeout_seconds: float = 5) -> None:
    async def run() -> None:
        client = ControlClient("127.0.0.1:1", backoff_seconds=0.01, follow_seconds=0.01)
        await client.close()
        client._client = fake  # the transport is Triton's; what is tested here is what follows a failed call
        config = model_config_pb2.ModelConfig(name="m")
        config.parameters[REVISION_PARAMETER].string_value = "new"
        files = {"1/model.py": b""}
        await client.load(
            DesiredModel("m", "new", config.SerializeToString(), files, load_timeout_seconds=timeout_seconds)
        )

    asyncio.run(run())


def test_a_cut_load_is_followed_not_sent_again() -> None:
    fake = CutTriton([CUT], ["has no available versions", "has no available versions", "rev:new"])
    load_through(fake)
    assert fake.loads == 1


def test_a_load_the_server_never_got_is_sent_again() -> None:
    fake = CutTriton([REFUSED, REFUSED], ["rev:new"])
    load_through(fake)
    assert fake.loads == 3


def test_a_cut_load_triton_holds_nothing_of_is_sent_again() -> None:
    fake = CutTriton([CUT], ["is not found", "rev:new"])
    load_through(fake)
    assert fake.loads == 2


def test_a_followed_load_that_never_ends_fails_naming_the_timeout() -> None:
    fake = CutTriton([CUT], ["rev:old"])
    with pytest.raises(ControlError) as raised:
        load_through(fake, timeout_seconds=0.2)
    assert fake.loads == 1 and "spec.loadTimeoutSeconds" in raised.value.message and not raised.value.transient


def test_the_load_timeout_is_a_positive_spec_field_outside_the_revision() -> None:
    server = TritonServer.model_validate(
        {**copy.deepcopy(SERVER), "metadata": {"name": "triton", "namespace": "default"}}
    )
    files = MODEL["spec"]["files"]
    plain = TritonModel.model_validate(model_document(ADD_CONFIG, files=files))
    patient = TritonModel.model_validate(model_document(ADD_CONFIG, files=files, loadTimeoutSeconds=1800))
    (plain_rendered, _), (patient_rendered, _) = (
        render_model(plain, server, FILES),
        render_model(patient, server, FILES),
    )
    assert plain_rendered is not None and patient_rendered is not None
    assert patient_rendered.desired.load_timeout_seconds == 1800 and plain_rendered.desired.load_timeout_seconds is None
    assert patient_rendered.revision == plain_rendered.revision
    assert patient_rendered.desired.config_json == plain_rendered.desired.config_json
    for wrong in (0, -5):
        with pytest.raises(ValidationError, match="greater than 0"):
            TritonModel.model_validate(model_document(ADD_CONFIG, loadTimeoutSeconds=wrong))


def connection_age_seconds(args: list[str]) -> float:
    """The max connection age plus its grace, as the rendered flags say: how long a gRPC call may last."""
    flags = dict(
        re.fullmatch(r"--([^=]+)=(.*)", arg).groups() for arg in args if arg.startswith("--grpc-max-connection-age")
    )  # type: ignore[union-attr]
    return (int(flags["grpc-max-connection-age"]) + int(flags["grpc-max-connection-age-grace"])) / 1000


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTriton]:
    """A server with the flags the operator renders for a default TritonServer (a short exit timeout
    only, so stopping it after an unfinished load is quick)."""
    with pod_triton(tmp_path_factory.mktemp("triton"), KEY) as server:
        yield server


def counted_code(counter: Path, seconds: float) -> bytes:
    """The add model, whose initialize() notes each start in `counter`, then takes `seconds`."""
    return add_code(
        initialize=f"with open({str(counter)!r}, 'a') as starts: starts.write('start\\n'); time.sleep({seconds})"
    )


@pytest.mark.triton
@pytest.mark.slow
def test_a_load_longer_than_a_connection_lives_loads_once(triton: LocalTriton, tmp_path: Path) -> None:
    age = connection_age_seconds(triton.args())
    assert age > 0, "the default TritonServer renders a gRPC max connection age"
    counter = tmp_path / "starts"
    model = desired("long_load", ADD_CONFIG, counted_code(counter, age + 10))

    async def run() -> None:
        async with ControlClient(triton.grpc_url, KEY) as client:
            await client.load(model)
            states = await client.model_states([model.name])
        assert states[model.name].ready and states[model.name].revision == model.revision

    asyncio.run(run())
    assert counter.read_text().splitlines() == ["start"]
    assert triton.log_tail(200_000).count('"loading: long_load:1"') == 1


@pytest.mark.triton
def test_a_load_past_its_timeout_fails_naming_the_field(triton: LocalTriton) -> None:
    timed = dataclasses.replace(
        desired("impatient", ADD_CONFIG, add_code(initialize="time.sleep(6)")), load_timeout_seconds=2
    )

    async def run() -> Any:
        async with ControlClient(triton.grpc_url, KEY) as client:
            return await Replica(client).sync({timed.name: timed})

    report = asyncio.run(run())
    [outcome] = report.outcomes
    assert not outcome.ok and "spec.loadTimeoutSeconds" in outcome.error and "2 s" in outcome.error
    assert outcome.seconds < 5
