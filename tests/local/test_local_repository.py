"""Your own model repository, as a Triton user brings it: imported whole, then served by `local` with
`--model-repository` standing in for the server's PVC or bucket, and each model asked the way its own
client asks it (HTTP for add_sub, a gRPC stream for the decoupled one, the metrics port for custom metrics).

The scenario runs on free ports (another process may hold Triton's 8000-8002 on a shared machine); that
`local` takes Triton's own ports by default, and refuses one in use with the flag to change it, is
checked without serving, in tests/cli/test_cli.py."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support.cli import run
from tests.support.local_mode import SHM, Output, local_command, processes_using, start_local
from tests.support.repository import LABELS, WEIGHTS_BYTES, weights, write_repository

pytestmark = pytest.mark.triton


@dataclass
class Served:
    repository: Path
    process: subprocess.Popen[bytes]
    output: Output
    http: str
    grpc: str
    metrics: str


def _start(crs: Path, repository: Path, workdir: Path, log: Path) -> tuple[subprocess.Popen[bytes], Output, list[str]]:
    """`local` on free ports; a port taken between pick and use is picked again."""
    for _ in range(3):
        command = local_command([crs], workdir, "--model-repository", str(repository))
        process, output = start_local(command, log)
        at = output.wait_for_first(("watching the files", "is in use"), timeout=300)
        if "is in use" not in log.read_text()[:at]:
            return process, output, command
        process.wait(timeout=60)
    raise AssertionError(f"no free ports in three tries:\n{log.read_text()}")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("own-repository")
    repository = write_repository(root / "models")
    code, _, err = run("import", str(repository), "--out", str(root / "crs"))
    assert code == 0, err
    # What the server's PVC would hold: the model too big for a ConfigMap (the others come with their files).
    pvc = root / "pvc"
    shutil.copytree(repository / "big_weights", pvc / "big_weights")
    workdir = root / "work"
    process, output, command = _start(root / "crs", pvc, workdir, root / "local.log")

    def flag(name: str) -> str:
        return command[command.index(name) + 1]

    try:
        yield Served(repository, process, output, flag("--http-port"), flag("--grpc-port"), flag("--metrics-port"))
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, output.path.read_text()[-3000:]
    assert processes_using(workdir) == []
    assert [name for name in os.listdir(SHM) if name.startswith(f"triton_operator_{process.pid}_")] == []


def test_every_model_of_the_repository_is_loaded(served: Served) -> None:
    table = served.output.path.read_text()
    for model in ("add_sub", "big_weights", "custom_metrics", "labels", "square_int32"):
        assert f"\n{model} " in table and f"load {model}: done" in table, table


def test_add_sub_answers_its_http_client(served: Served) -> None:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{served.http}")
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(np.array([1, 2, 3, 4], np.float32))
    inputs[1].set_data_from_numpy(np.array([4, 3, 2, 1], np.float32))
    result = client.infer("add_sub", inputs)
    assert result.as_numpy("OUTPUT0").tolist() == [5, 5, 5, 5] and result.as_numpy("OUTPUT1").tolist() == [-3, -1, 1, 3]
    client.close()


def test_the_decoupled_model_answers_on_a_grpc_stream(served: Served) -> None:
    responses: queue.Queue[tuple[object, object]] = queue.Queue()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{served.grpc}")
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    for count in (3, 1):
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([count], np.int32))
        client.async_stream_infer("square_int32", [tensor])
    answers = []
    for _ in range(4):
        result, error = responses.get(timeout=30)
        assert error is None, error
        answers.append(int(result.as_numpy("OUT")[0]))  # type: ignore[attr-defined]
    client.stop_stream()
    client.close()
    assert sorted(answers) == [1, 3, 3, 3]


def test_custom_metrics_shows_on_the_metrics_port(served: Served) -> None:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{served.http}")
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones(4, np.float32))
    assert client.infer("custom_metrics", inputs).as_numpy("OUTPUT0").tolist() == [2, 2, 2, 2]
    client.close()
    with urllib.request.urlopen(f"http://127.0.0.1:{served.metrics}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    [line] = [line for line in metrics.splitlines() if line.startswith("requests_process_latency_ns{")]
    assert 'model="custom_metrics"' in line and float(line.split()[-1]) > 0


def test_the_file_beside_model_py_comes_with_it(served: Served) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{served.grpc}")
    tensor = grpcclient.InferInput("INDEX", [1], "INT32")
    tensor.set_data_from_numpy(np.array([2], np.int32))
    assert client.infer("labels", [tensor]).as_numpy("LABEL").tolist() == [LABELS.splitlines()[2].encode()]
    client.close()


def test_weights_too_big_for_a_config_map_load_from_the_repository(served: Served) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{served.grpc}")
    tensor = grpcclient.InferInput("INDEX", [1], "INT64")
    tensor.set_data_from_numpy(np.array([WEIGHTS_BYTES - 1], np.int64))
    result = client.infer("big_weights", [tensor])
    client.close()
    assert result.as_numpy("SIZE").tolist() == [WEIGHTS_BYTES] and result.as_numpy("BYTE").tolist() == [weights()[-1]]


def test_the_ensemble_over_two_of_them_answers(served: Served) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{served.grpc}")
    inputs = [grpcclient.InferInput("A", [4], "FP32"), grpcclient.InferInput("B", [4], "FP32")]
    inputs[0].set_data_from_numpy(np.full(4, 3, np.float32))
    inputs[1].set_data_from_numpy(np.ones(4, np.float32))
    result = client.infer("add_sub_twice", inputs)
    client.close()
    assert result.as_numpy("TWICE_A").tolist() == [6] * 4 and result.as_numpy("TWICE_B").tolist() == [2] * 4
