"""The sync against a real tritonserver (nvidia-pytriton wheel, python backend, CPU)."""

from __future__ import annotations

import asyncio
import dataclasses
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from tests.support.bursts import MIXED, burst
from tests.support.models import ADD_CONFIG, CRASHY_CODE, STEP_CODE, add_code, pod_triton
from tests.support.models import python_model as desired
from tests.support.resources import model_document
from triton_operator.api.resources import TritonModel
from triton_operator.local.tritonserver import LocalTriton
from triton_operator.protocol.desired import DesiredModel
from triton_operator.protocol.names import GRPC_CONTROL_METADATA, RESTART_PARAMETER, REVISION_PARAMETER
from triton_operator.protocol.triton_proto import model_config_pb2 as pb
from triton_operator.render.config import built_model_config, desired_model
from triton_operator.triton.client import ControlClient, ControlError
from triton_operator.triton.sync import Replica, ReplicaReport

pytestmark = pytest.mark.triton

KEY = "sync-test-key"


class CountingClient(ControlClient):
    """Counts the calls that change a replica, to show a synced replica gets none."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.changes: list[str] = []

    async def load(self, model: DesiredModel) -> None:
        self.changes.append(f"load {model.name}")
        await super().load(model)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        self.changes.append(f"unload {name}")
        await super().unload(name, unload_dependents)


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTriton]:
    with pod_triton(tmp_path_factory.mktemp("triton"), KEY) as server:
        yield server


def sync(
    triton: LocalTriton, models: list[DesiredModel], managed: set[str] = frozenset(), replica: Replica | None = None
) -> tuple[Any, CountingClient, Replica]:
    """One sync in a fresh event loop; pass the returned replica back in to keep its memory."""

    async def run() -> tuple[Any, CountingClient, Replica]:
        client = CountingClient(triton.grpc_url, KEY)
        target = replica or Replica(client)
        target.client = client
        try:
            return await target.sync({m.name: m for m in models}, managed), client, target
        finally:
            await client.close()

    return asyncio.run(run())


def add(triton: LocalTriton, name: str, value: float = 1.0) -> np.ndarray:
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    a = np.full((1, 4), value, np.float32)
    inputs = [grpcclient.InferInput("A", [1, 4], "FP32"), grpcclient.InferInput("B", [1, 4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    try:
        return client.infer(name, inputs).as_numpy("SUM")
    finally:
        client.close()


def test_load_noop_reload_unload(triton: LocalTriton) -> None:
    model = desired("lifecycle", ADD_CONFIG, add_code())
    report, client, _ = sync(triton, [model])
    assert [(o.action.kind, o.ok) for o in report.outcomes] == [("load", True)]
    assert report.states["lifecycle"].ready and report.states["lifecycle"].revision == model.revision
    assert add(triton, "lifecycle").tolist() == [[2.0] * 4]

    report, client, _ = sync(triton, [model], managed={"lifecycle"})
    assert client.changes == [] and report.outcomes == []

    bigger = desired("lifecycle", {**ADD_CONFIG, "instanceGroup": [{"kind": "KIND_CPU", "count": 2}]}, add_code())
    report, client, _ = sync(triton, [bigger], managed={"lifecycle"})
    assert client.changes == ["load lifecycle"] and report.outcomes[0].action.kind == "reload"
    assert report.states["lifecycle"].revision == bigger.revision

    report, client, _ = sync(triton, [], managed={"lifecycle"})
    assert client.changes == ["unload lifecycle"] and report.managed == set()
    assert not report.states.get("lifecycle") or not report.states["lifecycle"].ready


def answered(triton: LocalTriton, name: str, value: float) -> bool:
    try:
        add(triton, name, value)
    except InferenceServerException:
        return False
    return True


def test_a_model_failing_every_request_is_reloaded_with_the_restart_parameter_and_serves_again(
    triton: LocalTriton,
) -> None:
    """A heal on a real Triton: a crashed stub's model is reloaded with the restart parameter set, runs at its
    own revision still, and serves again."""
    model = desired("crashy", ADD_CONFIG, CRASHY_CODE)
    wanted = {model.name: model}

    async def run() -> tuple[ReplicaReport, pb.ModelConfig, list[str], list[bool]]:
        async with CountingClient(triton.grpc_url, KEY) as client:
            replica = Replica(client)
            assert (await replica.sync(wanted)).ok
            replica.heal(wanted, await client.statistics(), ReplicaReport(client.url))  # the read to compare with
            crashed = [answered(triton, model.name, value) for value in (-1.0, 1.0, 1.0, 1.0)]
            replica.heal(wanted, await client.statistics(), ReplicaReport(client.url))
            report = await replica.sync(wanted, managed=wanted)  # waits for the heal started
            return report, await client.model_config(model.name), client.changes, crashed

    report, running, changes, crashed = asyncio.run(run())
    assert crashed == [False] * 4  # the crash, then a stub that is not healthy
    assert [(outcome.action.kind, outcome.ok) for outcome in report.outcomes] == [("heal", True)], report
    assert changes == ["load crashy", "load crashy"]
    assert running.parameters[RESTART_PARAMETER].string_value == "1"
    assert report.states["crashy"].ready and report.states["crashy"].revision == model.revision
    assert add(triton, "crashy").tolist() == [[2.0] * 4]
    sync(triton, [], managed={"crashy"})


class OrderingClient(CountingClient):
    """Records when reads and loads begin and end, to show which overlap."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.events: list[str] = []

    async def model_states(self, names: Any, known: Any = None) -> Any:
        self.events.append(f"read {sorted(names)}")
        states = await super().model_states(names, known)
        self.events.append("read done")
        return states

    async def load(self, model: DesiredModel) -> None:
        self.events.append(f"load {model.name}")
        await super().load(model)


def test_an_edited_model_is_reloaded_while_the_others_are_read(triton: LocalTriton) -> None:
    """The replica remembers the revision each model was ready at: a config edit needs no read
    before its reload (a load replaces whatever runs), so it starts at once."""
    moved, still = desired("moved", ADD_CONFIG, add_code()), desired("still", ADD_CONFIG, add_code())
    _, _, replica = sync(triton, [moved, still])
    edited = desired("moved", {**ADD_CONFIG, "dynamicBatching": {"maxQueueDelayMicroseconds": 777}}, add_code())

    async def run() -> Any:
        replica.client = OrderingClient(triton.grpc_url, KEY)
        try:
            return await replica.sync({m.name: m for m in (edited, still)}, {"moved", "still"}), replica.client.events
        finally:
            await replica.client.close()

    report, events = asyncio.run(run())
    assert events[:3] == ["read ['still']", "load moved", "read done"], events  # the reload began before the read ended
    assert [(o.action.kind, o.action.model, o.ok) for o in report.outcomes] == [("reload", "moved", True)]
    assert report.states["moved"].revision == edited.revision and report.states["still"].ready
    assert add(triton, "moved").tolist() == [[2.0] * 4]
    sync(triton, [], managed={"moved", "still"})


def edited(model: DesiredModel, edit: Callable[[pb.ModelConfig], None]) -> DesiredModel:
    """The model with `edit` made to its config message, at the revision that config carries: a load by hand."""
    config = model.parsed_config()
    edit(config)
    revision = config.parameters.get(REVISION_PARAMETER)
    serialized = config.SerializeToString(deterministic=True)
    return dataclasses.replace(model, serialized_config=serialized, revision=revision.string_value if revision else "")


def test_models_the_operator_did_not_load_are_left_alone(triton: LocalTriton) -> None:
    def by_someone_else(config: pb.ModelConfig) -> None:
        config.parameters["someone-else"].string_value = config.parameters[REVISION_PARAMETER].string_value
        del config.parameters[REVISION_PARAMETER]

    foreign = edited(desired("foreign", ADD_CONFIG, add_code()), by_someone_else)
    asyncio.run(_load_directly(triton, foreign))
    report, client, _ = sync(triton, [])
    assert client.changes == [] and report.ok
    checker = grpcclient.InferenceServerClient(triton.grpc_url)
    assert checker.is_model_ready("foreign")
    checker.close()


async def _load_directly(triton: LocalTriton, model: DesiredModel) -> None:
    async with ControlClient(triton.grpc_url, KEY) as client:
        await client.load(model)


def test_config_change_under_load_fails_no_request(triton: LocalTriton) -> None:
    base = desired("busy", ADD_CONFIG, add_code())
    replica_report, _, _ = sync(triton, [base])
    assert replica_report.ok
    counts = {"ok": 0, "failed": 0}
    errors: list[str] = []
    stop = threading.Event()

    def client_loop() -> None:
        client = grpcclient.InferenceServerClient(triton.grpc_url)
        a = np.ones((1, 4), np.float32)
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline and counts["ok"] + counts["failed"] < 50_000:
            inputs = [grpcclient.InferInput("A", [1, 4], "FP32"), grpcclient.InferInput("B", [1, 4], "FP32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(a)
            try:
                client.infer("busy", inputs)
                counts["ok"] += 1
            except Exception as error:  # every failure counts, whatever its kind
                counts["failed"] += 1
                errors.append(str(error))
        client.close()

    threads = [threading.Thread(target=client_loop) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    managed = {"busy"}
    for count, delay in ((2, 200), (1, 500), (3, 100)):
        config = {
            **ADD_CONFIG,
            "dynamicBatching": {"maxQueueDelayMicroseconds": delay},
            "instanceGroup": [{"kind": "KIND_CPU", "count": count}],
        }
        report, client, _ = sync(triton, [desired("busy", config, add_code())], managed)
        assert client.changes == ["load busy"] and report.ok, report
        time.sleep(0.3)
    stop.set()
    for thread in threads:
        thread.join()
    assert counts["failed"] == 0, errors[:3]
    assert counts["ok"] > 100


def test_rejected_config_keeps_the_old_version_and_reports_tritons_words(triton: LocalTriton) -> None:
    good = desired("fragile", ADD_CONFIG, add_code())
    report, _, _ = sync(triton, [good])
    assert report.ok
    broken = desired("fragile", ADD_CONFIG, add_code(initialize="raise RuntimeError('weights are corrupt')"))
    report, client, replica = sync(triton, [broken], {"fragile"})
    assert client.changes == ["load fragile"]
    assert "weights are corrupt" in report.failed["fragile"]
    assert report.states["fragile"].ready and report.states["fragile"].revision == good.revision
    assert add(triton, "fragile").tolist() == [[2.0] * 4], "the old version keeps answering"

    report, client, _ = sync(triton, [broken], {"fragile"}, replica)
    assert client.changes == [], "the same broken revision is not tried again"
    assert "weights are corrupt" in report.failed["fragile"]

    fixed = desired("fragile", ADD_CONFIG, add_code(offset=1))
    report, client, _ = sync(triton, [fixed], {"fragile"}, replica)
    assert client.changes == ["load fragile"] and report.ok and report.failed == {}
    assert add(triton, "fragile").tolist() == [[3.0] * 4]


def test_a_file_only_change_reloads_the_model(triton: LocalTriton) -> None:
    sync(triton, [desired("code", ADD_CONFIG, add_code())])
    assert add(triton, "code").tolist() == [[2.0] * 4]
    report, client, _ = sync(triton, [desired("code", ADD_CONFIG, add_code(offset=100))], {"code"})
    assert client.changes == ["load code"] and report.ok
    assert add(triton, "code").tolist() == [[102.0] * 4], "the new code answers"


RAGGED_CODE = textwrap.dedent(
    """
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [
                pb_utils.InferenceResponse([pb_utils.Tensor(
                    "SUM", pb_utils.get_input_tensor_by_name(r, "input_field").as_numpy().sum(axis=-1, keepdims=True))])
                for r in requests
            ]
    """
).encode()


def variable_dims_config(ragged: bool) -> dict[str, Any]:
    return {
        "backend": "python",
        "maxBatchSize": 16,
        "dynamicBatching": {"maxQueueDelayMicroseconds": 300000},
        "input": [
            {
                "name": "input_field",
                "dataType": "TYPE_FP32",
                "dims": [-1],
                **({"allowRaggedBatch": True} if ragged else {}),
            }
        ],
        "output": [{"name": "SUM", "dataType": "TYPE_FP32", "dims": [1]}],
        "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
    }


async def _mixed_shapes(triton: LocalTriton, name: str) -> tuple[int, int]:
    """The MIXED burst to the model: Triton's inference and execution counts once it has counted it."""
    await burst(triton.grpc_url, name, MIXED, ("input_field", "SUM"))
    async with grpcaio.InferenceServerClient(triton.grpc_url) as client:
        # Triton counts an execution after it has sent the responses: wait for the last count.
        for _ in range(50):
            stats = (await client.get_inference_statistics(name, headers={GRPC_CONTROL_METADATA: KEY})).model_stats[0]
            if stats.inference_count == len(MIXED):
                break
            await asyncio.sleep(0.1)
        return stats.inference_count, stats.execution_count


@pytest.mark.parametrize("ragged", [False, True], ids=["without-ragged", "with-ragged"])
def test_variable_dims_mixed_shapes_batch_only_with_ragged_batching(triton: LocalTriton, ragged: bool) -> None:
    name = f"variable_dims_{'ragged' if ragged else 'plain'}"
    report, _, _ = sync(triton, [desired(name, variable_dims_config(ragged), RAGGED_CODE)])
    assert report.ok
    inferences, executions = asyncio.run(_mixed_shapes(triton, name))
    assert inferences == 32
    if ragged:
        assert executions <= 4, f"ragged batching should form a few full batches, got {executions} executions"
    else:
        assert executions >= 8, f"different shapes should not batch together, got {executions} executions"


STEP_CONFIG: dict[str, Any] = {
    "backend": "python",
    "maxBatchSize": 0,
    "input": [{"name": "X", "dataType": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "Y", "dataType": "TYPE_FP32", "dims": [4]}],
    "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
}


def _ensemble() -> DesiredModel:
    config = {
        "platform": "ensemble",
        "maxBatchSize": 0,
        "input": [{"name": "IN", "dataType": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "OUT", "dataType": "TYPE_FP32", "dims": [4]}],
        "ensembleScheduling": {
            "step": [
                {"modelName": "times_two", "modelVersion": -1, "inputMap": {"X": "IN"}, "outputMap": {"Y": "doubled"}},
                {"modelName": "plus_one", "modelVersion": -1, "inputMap": {"X": "doubled"}, "outputMap": {"Y": "OUT"}},
            ]
        },
    }
    model = TritonModel.model_validate(model_document(config, modelName="pipeline"))
    return desired_model(built_model_config(model)[0])


def test_an_ensemble_loads_after_its_steps_and_unloads_first(triton: LocalTriton) -> None:
    steps = [
        desired("times_two", STEP_CONFIG, STEP_CODE.format(op="* 2").encode()),
        desired("plus_one", STEP_CONFIG, STEP_CODE.format(op="+ 1").encode()),
    ]
    pipeline = _ensemble()
    report, client, _ = sync(triton, [pipeline, *steps])
    assert client.changes[-1] == "load pipeline" and sorted(client.changes[:2]) == ["load plus_one", "load times_two"]
    # Triton answers the ensemble's load "failed to poll from model repository" (it looks for the steps
    # there too, and they came with their files), and serves it all the same: no load failed.
    assert report.ok and [o.error for o in report.outcomes] == ["", "", ""], report
    checker = grpcclient.InferenceServerClient(triton.grpc_url)
    tensor = grpcclient.InferInput("IN", [4], "FP32")
    tensor.set_data_from_numpy(np.ones(4, np.float32))
    assert checker.infer("pipeline", [tensor]).as_numpy("OUT").tolist() == [3.0] * 4

    report, client, _ = sync(triton, [], managed={"pipeline", "times_two", "plus_one"})
    assert client.changes[0] == "unload pipeline"
    assert report.managed == set()
    assert not any(checker.is_model_ready(name) for name in ("pipeline", "times_two", "plus_one"))
    checker.close()


def test_an_ensemble_with_a_step_served_nowhere_is_a_failed_load(triton: LocalTriton) -> None:
    report, _, _ = sync(triton, [_ensemble()])
    assert "times_two" in report.failed["pipeline"] and not report.states["pipeline"].ready, report


def test_a_config_triton_rejects_has_its_reason_only_in_the_log(triton: LocalTriton) -> None:
    def preferring_64(config: pb.ModelConfig) -> None:
        config.dynamic_batching.ClearField("max_queue_delay_microseconds")
        config.dynamic_batching.preferred_batch_size.append(64)

    # What validation stops before any server sees it: a preferred batch size above the maximum.
    model = edited(desired("rejected", ADD_CONFIG, add_code()), preferring_64)
    with pytest.raises(ControlError) as raised:
        asyncio.run(_load_directly(triton, model))
    assert "failed to poll from model repository" in raised.value.message
    assert "preferred" in triton.logged_error("rejected")
