"""Ensembles in local mode, on a real tritonserver: each step runs from the source the table names, also
where the model repository holds another copy of it (Triton loading an ensemble loads its steps again
from its repository), and an ensemble that serves is never reported as a failed load."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import yaml

from tests.conftest import ROOT
from tests.support.cli import run
from tests.support.local_mode import local_command, processes_using, start_local
from tests.support.models import STEP_CODE
from triton_operator.protocol.names import GRPC_CONTROL_METADATA, REVISION_PARAMETER

pytestmark = pytest.mark.triton

STEP_CONFIG = """\
backend: "python"
input [{{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }}]
output [{{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }}]
instance_group [{{ kind: KIND_CPU }}]
"""
# increment, then offset: ones in, (1 + 1) - 3 out.
CHAIN_CONFIG = """\
platform: "ensemble"
input [{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }]
ensemble_scheduling { step [
  { model_name: "increment" model_version: -1
    input_map { key: "X" value: "IN" } output_map { key: "Y" value: "plus_one" } },
  { model_name: "offset" model_version: -1
    input_map { key: "X" value: "plus_one" } output_map { key: "Y" value: "OUT" } }
] }
"""


def _imported(root: Path) -> tuple[Path, Path]:
    """A repository of the chain and its two steps, and its CRs from `import`."""
    repository = root / "models"
    for name, config, code in (
        ("increment", STEP_CONFIG.format(), STEP_CODE.format(op="+ 1")),
        ("offset", STEP_CONFIG.format(), STEP_CODE.format(op="- 3")),
        ("chain", CHAIN_CONFIG, None),
    ):
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "config.pbtxt").write_text(config)
        if code:
            (repository / name / "1" / "model.py").write_text(code)
    code, _, err = run("import", str(repository), "--out", str(root / "crs"), "--no-complete")
    assert code == 0, err
    return repository, root / "crs"


def _answer(grpc: str, model: str) -> list[float]:
    client = grpcclient.InferenceServerClient(grpc)
    name, output = ("IN", "OUT") if model == "chain" else ("X", "Y")
    tensor = grpcclient.InferInput(name, [4], "FP32")
    tensor.set_data_from_numpy(np.ones(4, np.float32))
    answer: list[float] = client.infer(model, [tensor]).as_numpy(output).tolist()
    client.close()
    return answer


def _revision(grpc: str, key: str, model: str) -> str:
    client = grpcclient.InferenceServerClient(grpc)
    config = client.get_model_config(model, headers={GRPC_CONTROL_METADATA: key}).config
    client.close()
    return str(config.parameters[REVISION_PARAMETER].string_value)


def test_an_ensemble_from_crs_alone_loads_after_its_steps_and_no_load_fails(tmp_path: Path) -> None:
    _, crs = _imported(tmp_path)
    workdir = tmp_path / "work"
    command = local_command([crs], workdir, "--once")
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    loads = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("load ")]
    assert loads[-1].startswith("load chain: done"), done.stdout
    assert "FAILED" not in done.stdout and "sample chain: ok" in done.stdout, done.stdout
    assert processes_using(workdir) == []


def test_a_step_a_cr_names_runs_as_its_cr_says_though_the_repository_holds_another_copy(tmp_path: Path) -> None:
    repository, crs = _imported(tmp_path)
    (crs / "offset.yaml").unlink()  # offset is the repository's alone, which the server then names
    server = yaml.safe_load((crs / "triton.yaml").read_text())
    server["spec"]["modelRepository"] = {"pvc": {"claimName": "triton-models"}}
    (crs / "triton.yaml").write_text(yaml.safe_dump(server))
    (repository / "increment" / "1" / "model.py").write_text(STEP_CODE.format(op="* 10"))  # not imported again
    workdir, log = tmp_path / "work", tmp_path / "local.log"
    command = local_command([crs], workdir, "--model-repository", str(repository))
    grpc = f"127.0.0.1:{command[command.index('--grpc-port') + 1]}"
    process, output = start_local(command, log)
    try:
        at = output.wait_for("watching the files", timeout=300)
        text = log.read_text()
        assert "FAILED" not in text and "load chain: done" in text, text
        key = (workdir / "control-key").read_text().strip()
        assert [line.split()[-1] for line in text.splitlines() if line.startswith("increment ")] == [
            str(crs / "increment.yaml")
        ]
        assert _answer(grpc, "increment") == [2.0] * 4 and _answer(grpc, "chain") == [-1.0] * 4
        offset_revision = _revision(grpc, key, "offset")
        assert offset_revision

        # The ensemble loads again: its steps stay as the table names them.
        chain = crs / "chain.yaml"
        document = yaml.safe_load(chain.read_text())
        document["spec"]["config"]["parameters"] = {"edited": {"stringValue": "yes"}}
        chain.write_text(yaml.safe_dump(document))
        output.wait_for("reload chain: done", at)
        assert _answer(grpc, "increment") == [2.0] * 4 and _answer(grpc, "chain") == [-1.0] * 4
        assert _revision(grpc, key, "offset") == offset_revision
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()[-3000:]
    assert processes_using(workdir) == []
