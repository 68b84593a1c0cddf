"""A python model needing a package that is not in the Python its stub runs in, served from an execution
environment: a venv packed with venv-pack into the model's folder, named by parameters.EXECUTION_ENV_PATH,
loaded by `local --model-repository` as the server's repository would hold it.

`six` stands in for the package (torch in the issue): small, pure Python, and not in the project's venv,
which is where the stub looks without an environment. The packed environment is built once per module
from PyPI (six, numpy<2 for triton_python_backend_utils, venv-pack) with the running Python: the stub
local mode runs is the one for that version, and an environment of another version is not seen."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import venv
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.support.local_mode import SHM, local_command, processes_using, start_local

pytestmark = pytest.mark.triton

MODEL_PY = textwrap.dedent(
    """
    import numpy as np
    import six  # not in the stub's own environment
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * (2 if six.PY3 else 0))]
                )
                for r in requests
            ]
    """
)
CONFIG = {
    "backend": "python",
    "maxBatchSize": 0,
    "input": [{"name": "X", "dataType": "TYPE_FP32", "dims": [1]}],
    "output": [{"name": "Y", "dataType": "TYPE_FP32", "dims": [1]}],
    "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
}


def model_cr(name: str, parameters: dict[str, object]) -> str:
    spec = {"serverRef": {"name": "triton"}, "config": {**CONFIG, "parameters": parameters}}
    return (
        "---\napiVersion: triton-operator.io/v1alpha1\nkind: TritonModel\n"
        f"metadata: {{name: {name}, namespace: default}}\nspec: {spec!r}\n"
    ).replace("'", '"')


@pytest.fixture(scope="module")
def packed_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """env.tar.gz: a venv with six and numpy<2, packed relocatable by venv-pack (a plain tar of a venv
    runs from where it was built, measured: its activate script names that path)."""
    root = tmp_path_factory.mktemp("execution-env")
    env = root / "env"
    venv.create(env, with_pip=True)
    install = subprocess.run(
        [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "six", "numpy<2", "venv-pack"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if install.returncode != 0:
        pytest.skip(
            f"building the environment needs PyPI (six, numpy<2, venv-pack), and pip failed: {install.stderr[-500:]}"
        )
    subprocess.run(
        [str(env / "bin" / "venv-pack"), "-p", str(env), "-o", str(root / "env.tar.gz"), "-q"], check=True, timeout=600
    )
    return root / "env.tar.gz"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, packed_env: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("served-env")
    repository = root / "repository"
    for name in ("with-env", "without-env"):
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "1" / "model.py").write_text(MODEL_PY)
    os.link(packed_env, repository / "with-env" / "env.tar.gz")
    crs = root / "crs.yaml"
    crs.write_text(
        "apiVersion: triton-operator.io/v1alpha1\nkind: TritonServer\nmetadata: {name: triton, namespace: default}\n"
        "spec: {backends: [python], modelRepository: {pvc: {claimName: models}}}\n"
        + model_cr("with-env", {"EXECUTION_ENV_PATH": {"stringValue": "$$TRITON_MODEL_DIRECTORY/env.tar.gz"}})
        + model_cr("without-env", {})
    )
    workdir = root / "work"
    command = local_command([crs], workdir, "--model-repository", str(repository))
    log = root / "local.log"
    process, output = start_local(command, log)
    try:
        output.wait_for_first(("load with-env: done", "load with-env: FAILED"), timeout=300)
        output.wait_for_first(("load without-env: done", "load without-env: FAILED"), timeout=300)
        yield command[command.index("--grpc-port") + 1], log
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()[-3000:]
    assert processes_using(workdir) == []
    assert [name for name in os.listdir(SHM) if name.startswith(f"triton_operator_{process.pid}_")] == []


def test_without_an_environment_the_package_is_missing(served: tuple[str, Path]) -> None:
    assert "load without-env: FAILED" in served[1].read_text() and "No module named 'six'" in served[1].read_text()


def test_the_model_runs_in_its_execution_environment(served: tuple[str, Path]) -> None:
    grpc_port, log = served
    assert "load with-env: done" in log.read_text(), log.read_text()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    tensor = grpcclient.InferInput("X", [1], "FP32")
    tensor.set_data_from_numpy(np.array([21.0], np.float32))
    assert client.infer("with-env", [tensor]).as_numpy("Y").tolist() == [42.0]
    client.close()
