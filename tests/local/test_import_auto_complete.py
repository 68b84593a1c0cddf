"""Models whose config comes from model.py's `auto_complete_config` (python_backend's auto_complete
example), imported with a real tritonserver completing them: batch_auto_complete with no config.pbtxt,
nobatch_auto_complete with a partial one. Their TritonModels hold whole configs, validate finds nothing,
and `local` (whose Triton runs with auto-complete disabled, as the operator's pods do) serves them with
the example client's checks passing and its inputs giving the expected outputs."""

from __future__ import annotations

import os
import signal
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml

from tests.support.auto_complete import BROKEN_MODEL, EXPECTED_MAX_BATCH_SIZE, write_auto_complete_repository
from tests.support.cli import run
from tests.support.local_mode import SHM, local_command, processes_using, start_local
from triton_operator.api.config_json import ModelConfig
from triton_operator.local.auto_complete import complete_configs
from triton_operator.protocol.names import REVISION_PARAMETER
from triton_operator.protocol.triton_proto import model_config_pb2
from triton_operator.repository import read_repository

pytestmark = pytest.mark.triton

EXPECTED_TENSORS = {
    "input": [
        {"name": "INPUT0", "dataType": "TYPE_FP32", "dims": [4]},
        {"name": "INPUT1", "dataType": "TYPE_FP32", "dims": [4]},
    ],
    "output": [
        {"name": "OUTPUT0", "dataType": "TYPE_FP32", "dims": [4]},
        {"name": "OUTPUT1", "dataType": "TYPE_FP32", "dims": [4]},
    ],
}
IMPORT_FOLDERS = str(Path(tempfile.gettempdir()) / "triton-operator-import-")


@dataclass
class Imported:
    repository: Path
    crs: Path
    err: str


def _left_by_import() -> tuple[list[str], list[str]]:
    """What import's tritonserver (run in this process) could leave behind: its processes and shm regions."""
    return processes_using(Path(IMPORT_FOLDERS)), [
        name for name in os.listdir(SHM) if name.startswith(f"triton_operator_{os.getpid()}_")
    ]


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Imported:
    root = tmp_path_factory.mktemp("auto-complete")
    repository = write_auto_complete_repository(root / "models", partial=True)
    code, _, err = run("import", str(repository), "--out", str(root / "crs"))
    assert code == 0, err
    assert _left_by_import() == ([], [])
    return Imported(repository, root / "crs", err)


def _spec(imported: Imported, name: str) -> dict:
    [model] = [d for d in yaml.safe_load_all((imported.crs / f"{name}.yaml").read_text()) if d["kind"] == "TritonModel"]
    return model["spec"]


def test_import_says_what_triton_completed(imported: Imported) -> None:
    assert imported.err.splitlines() == [
        f"{imported.repository / 'batch_auto_complete'}: completed by Triton's auto-complete: "
        "2 inputs, 2 outputs, maxBatchSize 4, dynamicBatching (no config.pbtxt)",
        f"{imported.repository / 'nobatch_auto_complete'}: completed by Triton's auto-complete: "
        "2 inputs, 2 outputs, maxBatchSize 0 (a python model whose config.pbtxt has no inputs)",
    ]


def test_the_crs_hold_whole_configs_without_what_triton_fills_anyway(imported: Imported) -> None:
    assert _spec(imported, "batch-auto-complete")["config"] == {
        "maxBatchSize": 4,
        **EXPECTED_TENSORS,
        "dynamicBatching": {},
        "backend": "python",
    }
    # The partial config's instance group stays as written.
    assert _spec(imported, "nobatch-auto-complete")["config"] == {
        **EXPECTED_TENSORS,
        "instanceGroup": [{"count": 2, "kind": "KIND_CPU"}],
        "backend": "python",
    }


def test_validate_finds_nothing(imported: Imported) -> None:
    code, out, err = run("validate", str(imported.crs))
    assert (code, err) == (0, ""), err
    assert out.splitlines()[-1].startswith("2 models, 1 server: 0 errors, 0 warnings")


@dataclass
class Served:
    http: str
    grpc: str
    auto_completed: dict[str, ModelConfig]  # what Triton's auto-complete answers for each model


@pytest.fixture(scope="module")
def served(imported: Imported, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    completions = complete_configs(read_repository(imported.repository).models)
    auto_completed = {}
    for completion in completions:
        assert completion.config is not None, completion.error
        auto_completed[completion.config.name] = completion.config
    root = tmp_path_factory.mktemp("auto-complete-local")
    workdir = root / "work"
    for _ in range(3):  # a port taken between pick and use is picked again
        command = local_command([imported.crs], workdir)
        log = root / "local.log"
        process, output = start_local(command, log)
        at = output.wait_for_first(("watching the files", "is in use"), timeout=300)
        if "is in use" not in log.read_text()[:at]:
            break
        process.wait(timeout=60)
    else:
        raise AssertionError(f"no free ports in three tries:\n{log.read_text()}")
    try:
        yield Served(
            command[command.index("--http-port") + 1], command[command.index("--grpc-port") + 1], auto_completed
        )
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()[-3000:]
    assert processes_using(workdir) == []
    assert [name for name in os.listdir(SHM) if name.startswith(f"triton_operator_{process.pid}_")] == []


def test_local_serves_them_as_the_example_client_expects(served: Served) -> None:
    """The example client's checks (max_batch_size, each tensor's type and dims), then its models' arithmetic."""
    a, b = np.array([1, 2, 3, 4], np.float32), np.array([4, 3, 2, 1], np.float32)
    with httpclient.InferenceServerClient(f"127.0.0.1:{served.http}") as client:
        for model, max_batch_size in EXPECTED_MAX_BATCH_SIZE.items():
            config = client.get_model_config(model)
            assert config.get("max_batch_size", 0) == max_batch_size, model
            for kind, expected in EXPECTED_TENSORS.items():
                assert [(t["name"], t["data_type"], t["dims"]) for t in config[kind]] == [
                    (e["name"], e["dataType"], e["dims"]) for e in expected
                ]
            shape = [1, 4] if max_batch_size else [4]
            inputs = [httpclient.InferInput("INPUT0", shape, "FP32"), httpclient.InferInput("INPUT1", shape, "FP32")]
            inputs[0].set_data_from_numpy(a.reshape(shape))
            inputs[1].set_data_from_numpy(b.reshape(shape))
            result = client.infer(model, inputs)
            assert result.as_numpy("OUTPUT0").reshape(4).tolist() == [5, 5, 5, 5], model
            assert result.as_numpy("OUTPUT1").reshape(4).tolist() == [-3, -1, 1, 3], model


def test_without_auto_complete_the_cr_loads_to_what_auto_complete_made(served: Served) -> None:
    """What import left out of the CRs, Triton fills on the operator's servers (auto-complete disabled) all the
    same: they load the config auto-complete made, but for the files' revision the operator adds and the
    instance group the partial config wrote (import's Triton loads one CPU instance of each model)."""
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{served.grpc}")
    try:
        loaded = {model: client.get_model_config(model).config for model in EXPECTED_MAX_BATCH_SIZE}
    finally:
        client.close()
    for model, config in loaded.items():
        del config.parameters[REVISION_PARAMETER]
        expected = served.auto_completed[model]
        if model == "nobatch_auto_complete":
            assert [(group.count, group.kind) for group in config.instance_group] == [
                (2, model_config_pb2.ModelInstanceGroup.KIND_CPU)
            ]
            config.ClearField("instance_group")
            expected.ClearField("instance_group")
        assert config == expected, model


def test_a_model_whose_auto_complete_raises_is_refused_with_tritons_words(tmp_path: Path) -> None:
    (tmp_path / "broken" / "1").mkdir(parents=True)
    (tmp_path / "broken" / "1" / "model.py").write_text(BROKEN_MODEL)
    code, out, err = run("import", str(tmp_path / "broken"))
    assert (code, out) == (1, "")
    assert (
        f"error: {tmp_path / 'broken'}: Triton's auto-complete could not complete its config (no config.pbtxt): " in err
    )
    assert (
        "ValueError: the tokenizer folder is missing" in err
        and f"{tmp_path / 'broken'}/1/model.py(4): auto_complete_config" in err
    )
    assert "Fix model.py's auto_complete_config, or write the whole config.pbtxt and import with --no-complete" in err
    assert _left_by_import() == ([], [])


def test_a_model_with_nothing_to_auto_complete_imports_without_running_its_code(tmp_path: Path) -> None:
    """A python model with no inputs whose model.py defines no auto_complete_config (as some of Triton's QA
    models): Triton's auto-complete would load it, running an initialize() that takes a minute. Import takes
    its config as written, and no code of the model runs."""
    initialized = tmp_path / "initialized"
    model = tmp_path / "models" / "no_inputs"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "python"\noutput [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }]\n')
    (model / "1" / "model.py").write_text(
        "import time\nfrom pathlib import Path\n\n\nclass TritonPythonModel:\n"
        f"    def initialize(self, args):\n        Path({str(initialized)!r}).touch()\n        time.sleep(60)\n\n"
        "    def execute(self, requests):\n        return []\n"
    )
    started = time.monotonic()
    code, out, err = run("import", str(model))
    seconds = time.monotonic() - started
    assert (code, err) == (0, ""), err
    assert not initialized.exists()
    assert seconds < 1, f"import took {seconds:.1f}s"
    [document] = [d for d in yaml.safe_load_all(out) if d["kind"] == "TritonModel"]
    assert document["spec"]["config"] == {
        "output": [{"name": "OUT", "dataType": "TYPE_INT32", "dims": [1]}],
        "backend": "python",
    }
    assert _left_by_import() == ([], [])


def test_a_file_too_large_for_a_config_map_is_there_for_auto_complete(tmp_path: Path) -> None:
    """Such a file is sized, never read, by import: Triton's auto-complete gets it copied from the folder."""
    model = tmp_path / "weighted"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(
        BROKEN_MODEL.replace(
            '        raise ValueError("the tokenizer folder is missing")\n',
            "        from pathlib import Path\n\n"
            "        size = (Path(__file__).parent / 'weights.bin').stat().st_size\n"
            "        auto_complete_model_config.set_max_batch_size(size >> 20)\n"
            "        auto_complete_model_config.add_input({'name': 'X', 'data_type': 'TYPE_FP32', 'dims': [1]})\n"
            "        auto_complete_model_config.add_output({'name': 'Y', 'data_type': 'TYPE_FP32', 'dims': [1]})\n"
            "        return auto_complete_model_config\n",
        )
    )
    with (model / "1" / "weights.bin").open("wb") as weights:
        weights.truncate(3 << 20)
    code, out, err = run("import", str(model))
    assert code == 0, err
    [document] = [d for d in yaml.safe_load_all(out) if d["kind"] == "TritonModel"]
    assert document["spec"]["config"]["maxBatchSize"] == 3 and "files" not in document["spec"]
    assert _left_by_import() == ([], [])


def test_imports_tritonserver_loads_only_for_import(tmp_path: Path) -> None:
    """While it completes configs, no other user of the machine may load a model (its code would run as you)."""
    from triton_operator.local.auto_complete import _started

    (tmp_path / "models").mkdir()
    triton = _started(tmp_path / "work", tmp_path / "models")
    try:
        request = urllib.request.Request(f"{triton.http_url}/v2/repository/models/any/load", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 403
    finally:
        triton.stop()
