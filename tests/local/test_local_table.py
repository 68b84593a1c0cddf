"""The table `local` prints, as a user watching it reads it, against a real tritonserver: each warning printed
once per model until it changes (a save rereads every file), what Triton says of each model even after
someone loads or unloads it on Triton's control API, and no batch figures for a model that does not batch."""

from __future__ import annotations

import json
import os
import re
import signal
import urllib.request
from pathlib import Path

import pytest

from tests.support.local_mode import SHM, local_command, processes_using, start_local
from tests.support.repository import ADD_SUB_CODE, ADD_SUB_CONFIG
from triton_operator.protocol.names import CONTROL_HEADER

pytestmark = pytest.mark.triton

# A python model with a variable dim: its /dev/shm need is unknown, which validation warns of.
ECHO_CONFIG = """\
name: "echo"
backend: "python"
input [{ name: "IN" data_type: TYPE_FP32 dims: [ DIM ] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [ DIM ] }]
instance_group [{ kind: KIND_CPU }]
"""
ECHO_CODE = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]
"""
ECHO_WARNING = "model 'echo' runs on the python backend with variable-size tensors"


def _write_model(repository: Path, name: str, config: str, code: str) -> None:
    (repository / name / "1").mkdir(parents=True, exist_ok=True)
    (repository / name / "config.pbtxt").write_text(config)
    (repository / name / "1" / "model.py").write_text(code)


def _post(url: str, key: str, body: dict[str, object] | None = None) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(body or {}).encode(), headers={CONTROL_HEADER: key}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.status == 200


def _row(table: str, model: str) -> list[str]:
    """The model's row in `table`, cell by cell."""
    [row] = [line for line in table.splitlines() if line.startswith(f"{model} ")]
    return re.split(r" {2,}", row)


def test_the_table_follows_triton_and_says_each_warning_once(tmp_path: Path) -> None:
    repository = tmp_path / "models"
    _write_model(repository, "add_sub", ADD_SUB_CONFIG, ADD_SUB_CODE)
    _write_model(repository, "echo", ECHO_CONFIG.replace("DIM", "-1"), ECHO_CODE)
    workdir, log = tmp_path / "work", tmp_path / "out.log"
    command = local_command([], workdir, "--model-repository", str(repository))
    http = f"http://127.0.0.1:{command[command.index('--http-port') + 1]}"
    process, output = start_local(command, log)
    try:
        at = output.wait_for("watching the files", timeout=300)
        assert log.read_text().count(ECHO_WARNING) == 1, log.read_text()
        key = (workdir / "control-key").read_text().strip()

        # A save of another model rereads every file: echo's warning, unchanged, is not printed again.
        model_py = repository / "add_sub" / "1" / "model.py"
        model_py.write_text(model_py.read_text() + "# saved\n")
        at = output.wait_for("reload add_sub: done", at)
        at = output.wait_for("MODEL ", at)
        assert log.read_text().count(ECHO_WARNING) == 1, log.read_text()
        # Its warning gone, then back: printed again.
        (repository / "echo" / "config.pbtxt").write_text(ECHO_CONFIG.replace("DIM", "4"))
        at = output.wait_for("reload echo: done", at)
        (repository / "echo" / "config.pbtxt").write_text(ECHO_CONFIG.replace("DIM", "-1"))
        at = output.wait_for("reload echo: done", at)
        at = output.wait_for("\necho ", output.wait_for("MODEL ", at))  # that sync's table, whole
        assert log.read_text().count(ECHO_WARNING) == 2, log.read_text()

        # add_sub does not batch (maxBatchSize 0): its batch column stays "-" once requests came in.
        inputs = [{"name": f"INPUT{i}", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]} for i in (0, 1)]
        _post(f"{http}/v2/models/add_sub/infer", key, {"inputs": inputs})
        header = output.wait_for("MODEL ", at)
        at = output.wait_for("\necho ", header)  # the last row: add_sub's is written whole
        assert _row(log.read_text()[header:at], "add_sub")[5] == "-", log.read_text()[header:at]

        # Unloaded and loaded again on Triton's control API by someone else: the table says so, no file saved.
        _post(f"{http}/v2/repository/models/add_sub/unload", key)
        unloaded = output.wait_for("add_sub  UNAVAILABLE", at, timeout=30)
        at = output.wait_for("\necho ", unloaded)
        assert _row(log.read_text()[unloaded - len("add_sub  UNAVAILABLE") : at], "add_sub")[-1] == "unloaded"
        _post(f"{http}/v2/repository/models/add_sub/load", key)
        at = output.wait_for("add_sub  READY", at, timeout=30)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()
    assert processes_using(workdir) == []
    assert [name for name in os.listdir(SHM) if name.startswith(f"triton_operator_{process.pid}_")] == []
