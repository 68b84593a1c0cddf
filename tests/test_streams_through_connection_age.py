"""A stream outlives the gRPC connection age: a real tritonserver started with the flags rendered
for a TritonServer carries a decoupled model's one-response-a-second stream to its end, though its
connection is recycled (GOAWAY) several times meanwhile. Then a grace shorter than the stream, to
show the measurement sees the cut.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.support.ports import free_ports
from triton_operator.api.server import TritonServerSpec
from triton_operator.local.tritonserver import LocalTriton, Ports
from triton_operator.render.args import server_args

pytestmark = pytest.mark.triton

MODEL = "ticker"
# A token stream's shape: one response a second, for as many seconds as asked.
CONFIG = f"""\
name: "{MODEL}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: True }}
input [{{ name: "SECONDS" data_type: TYPE_INT32 dims: [ 1 ] }}]
output [{{ name: "TICK" data_type: TYPE_INT32 dims: [ 1 ] }}]
instance_group [{{ count: 1 kind: KIND_CPU }}]
"""
CODE = """\
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            seconds = int(pb_utils.get_input_tensor_by_name(request, "SECONDS").as_numpy()[0])
            sender = request.get_response_sender()
            for tick in range(seconds):
                time.sleep(1)
                sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("TICK", np.array([tick], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


@contextmanager
def serving(spec: TritonServerSpec, workdir: Path) -> Iterator[LocalTriton]:
    """Our tritonserver, run with the flags rendered for `spec`, the model loaded."""
    (workdir / "models" / MODEL / "1").mkdir(parents=True)
    (workdir / "models" / MODEL / "config.pbtxt").write_text(CONFIG)
    (workdir / "models" / MODEL / "1" / "model.py").write_text(CODE)
    triton = LocalTriton(spec, workdir, Ports(*free_ports(3)))
    with triton:
        client = grpcclient.InferenceServerClient(triton.grpc_url)
        try:
            client.load_model(MODEL)
        finally:
            client.close()
        yield triton


def stream(url: str, seconds: int) -> tuple[list[int], list[str], float]:
    """One request on a fresh channel: the ticks that came, the errors, and the seconds until the
    stream ended (its final response or an error)."""
    events: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    ticks: list[int] = []
    errors: list[str] = []
    started = time.monotonic()
    try:
        client.start_stream(callback=lambda result, error: events.put((result, error)))
        tensor = grpcclient.InferInput("SECONDS", [1], "INT32")
        tensor.set_data_from_numpy(np.array([seconds], np.int32))
        client.async_stream_infer(MODEL, [tensor], enable_empty_final_response=True)
        while True:
            result, error = events.get(timeout=seconds + 60)
            if error is not None:
                errors.append(str(error))
                break
            response = result.get_response()
            if response.outputs:
                ticks.append(int(result.as_numpy("TICK")[0]))
            if response.parameters["triton_final_response"].bool_param:
                break
    finally:
        ended = time.monotonic() - started
        client.stop_stream()
        client.close()
    return ticks, errors, ended


def age_flags(spec: TritonServerSpec) -> list[str]:
    return [flag for flag in server_args(spec, control_key=None) if flag.startswith("--grpc-max-connection-age")]


def test_a_stream_longer_than_several_connection_ages_arrives_whole(tmp_path: Path) -> None:
    """The flags of a default TritonServer: the stream's connection gets its GOAWAY about every
    max age, and the stream goes on to its end."""
    spec = TritonServerSpec()
    seconds = 60
    assert spec.grpc.max_connection_age_ms * 3 < seconds * 1000, age_flags(spec)  # several ages, or it proves nothing
    with serving(spec, tmp_path) as triton:
        ticks, errors, ended = stream(triton.grpc_url, seconds)
        print(f"{age_flags(spec)}: {len(ticks)} of {seconds} ticks, errors {errors}, in {ended:.1f}s")
        assert errors == [] and ticks == list(range(seconds)), (age_flags(spec), errors, len(ticks))


def test_a_grace_shorter_than_the_stream_cuts_it(tmp_path: Path) -> None:
    """What the default grace avoids: the connection closes at age + grace and the stream with it."""
    spec = TritonServerSpec.model_validate({"grpc": {"maxConnectionAgeMs": 2000, "maxConnectionAgeGraceMs": 1000}, "drain": {"maxRequestSeconds": 1}})
    seconds = 10
    with serving(spec, tmp_path) as triton:
        ticks, errors, ended = stream(triton.grpc_url, seconds)
        print(f"{age_flags(spec)}: {len(ticks)} of {seconds} ticks, errors {errors}, in {ended:.1f}s")
        assert len(ticks) < seconds and len(errors) == 1 and "UNAVAILABLE" in errors[0], (ticks, errors)
        assert ended < 2 * 1.1 + 1 + 1, ended  # the jittered age and the grace, then the cut
