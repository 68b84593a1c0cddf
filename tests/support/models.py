"""Python models (their code and configs) and how the sync loads them, for tests and benchmarks on a
local tritonserver."""

from __future__ import annotations

import asyncio
import contextlib
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.ports import free_ports
from triton_operator.api.resources import TritonModel
from triton_operator.api.server import TritonServerSpec
from triton_operator.local.tritonserver import LocalTriton, Ports
from triton_operator.protocol.desired import DesiredModel
from triton_operator.render.config import built_model_config, desired_model
from triton_operator.triton.client import ControlClient
from triton_operator.triton.sync import Replica

# model.py of a python model that answers OUT = 2 * IN, whatever the shape.
DOUBLING_CODE = textwrap.dedent(
    """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)]
                )
                for r in requests
            ]
    """
).encode()

# A python model adding its two FP32 inputs of 4: SUM = A + B (+ the offset add_code is given).
ADD_CONFIG: dict[str, Any] = {
    "backend": "python",
    "maxBatchSize": 8,
    "dynamicBatching": {"maxQueueDelayMicroseconds": 100},
    "input": [{"name": "A", "dataType": "TYPE_FP32", "dims": [4]}, {"name": "B", "dataType": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "SUM", "dataType": "TYPE_FP32", "dims": [4]}],
    "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
}


# model.py of an ensemble's step: Y is X with `{op}` applied (e.g. "+ 1"), so each step's answer tells them apart.
STEP_CODE = textwrap.dedent(
    """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() {op})]
                )
                for r in requests
            ]
    """
)


def add_code(offset: float = 0.0, initialize: str = "pass", execute: str = "pass") -> bytes:
    """model.py of the add model; a new offset is new code, `initialize` can make its load fail, and
    `execute` runs first in each execution (a delay, or an exception failing every request)."""
    return textwrap.dedent(
        f"""
        import time
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def initialize(self, args):
                {initialize}

            def execute(self, requests):
                {execute}
                responses = []
                for request in requests:
                    a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
                    b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
                    responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", a + b + {offset})]))
                return responses
        """
    ).encode()


# The add model's code, but a request whose first value is negative ends the stub's process: Triton goes on
# calling the model ready and fails each request with "Stub process ... is not healthy".
CRASHY_CODE = add_code(
    execute=(
        "import os\n"
        "                if pb_utils.get_input_tensor_by_name(requests[0], 'A').as_numpy()[0][0] < 0: os._exit(1)"
    )
)


# add_code's `execute` for a python model's way to report a bad request: an error response, which Triton
# counts as a success and a client as a failure.
ERROR_RESPONSE = (
    "return [pb_utils.InferenceResponse(error=pb_utils.TritonError('this revision is broken')) for _ in requests]"
)


# model.py of a python model that answers SUM, the sum of each row of X (any length).
SUM_CODE = textwrap.dedent(
    """
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                values = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
                total = values.sum(axis=-1, keepdims=True).astype(np.float32)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total)]))
            return responses
    """
).encode()
# Long enough for 32 requests to gather even on a busy machine: equal shapes fill 16 at once.
DELAY_US = 1_000_000


def sum_config(ragged: bool, delay_us: int = DELAY_US) -> dict[str, Any]:
    """The sum model's config: `dims: [-1]`, batches of up to 16, with or without allowRaggedBatch."""
    return {
        "backend": "python",
        "maxBatchSize": 16,
        "dynamicBatching": {"maxQueueDelayMicroseconds": delay_us},
        "input": [{"name": "X", "dataType": "TYPE_FP32", "dims": [-1], "allowRaggedBatch": ragged}],
        "output": [{"name": "SUM", "dataType": "TYPE_FP32", "dims": [1]}],
        "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
    }


# A decoupled python model shaped like a token stream: TICKS responses (0, 1, ...), PERIOD_MS apart,
# then the final flag.
TICKER_CONFIG: dict[str, Any] = {
    "backend": "python",
    "maxBatchSize": 0,
    "modelTransactionPolicy": {"decoupled": True},
    "input": [
        {"name": "TICKS", "dataType": "TYPE_INT32", "dims": [1]},
        {"name": "PERIOD_MS", "dataType": "TYPE_INT32", "dims": [1]},
    ],
    "output": [{"name": "TICK", "dataType": "TYPE_INT32", "dims": [1]}],
    "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
}
TICKER_CODE = textwrap.dedent(
    """
    import time

    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            for request in requests:
                ticks = int(pb_utils.get_input_tensor_by_name(request, "TICKS").as_numpy()[0])
                period = int(pb_utils.get_input_tensor_by_name(request, "PERIOD_MS").as_numpy()[0]) / 1000
                sender = request.get_response_sender()
                for tick in range(ticks):
                    time.sleep(period)
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("TICK", np.array([tick], np.int32))]))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return None
    """
).encode()


def python_model(name: str, config: dict[str, Any], code: bytes) -> DesiredModel:
    """A TritonModel named `name` with `config` and `code` as 1/model.py, rendered for the sync."""
    document = {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonModel",
        "metadata": {"name": name.replace("_", "-")},
        "spec": {"serverRef": {"name": "triton"}, "modelName": name, "config": config},
    }
    files = {"1/model.py": code}
    return desired_model(built_model_config(TritonModel.model_validate(document), files)[0], files)


def load(triton: LocalTriton, *models: DesiredModel, control_key: str | None = None) -> None:
    """Sync the models onto the server; they must all load."""

    async def sync() -> None:
        async with ControlClient(triton.grpc_url, control_key) as client:
            report = await Replica(client).sync({model.name: model for model in models})
            assert report.ok, report

    asyncio.run(sync())


@contextlib.contextmanager
def pod_triton(workdir: Path, control_key: str | None = None) -> Iterator[LocalTriton]:
    """A tritonserver with the flags rendered for a default TritonServer (a short exit timeout only, so
    a stop after an unfinished load is quick); stopped on leaving, with no /dev/shm region left behind."""
    server = LocalTriton(
        TritonServerSpec.model_validate({"exitTimeoutSeconds": 5}),
        workdir,
        Ports(*free_ports(3)),
        control_key=control_key,
    )
    with server:
        yield server
    assert server.shm_regions() == []
