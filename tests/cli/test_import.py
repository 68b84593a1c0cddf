"""`triton-operator import` of a whole model repository: a TritonModel per model, its files in a ConfigMap
(binaryData for bytes), the TritonServer its models need, and what is too big for a ConfigMap left to the
server's modelRepository. Round trip: import, then render, gives back each config.pbtxt and every file."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from google.protobuf import text_format

from tests.support.auto_complete import write_auto_complete_repository
from tests.support.cli import run
from tests.support.repository import LABELS, weights, write_repository
from triton_operator.api.config_json import ModelConfig
from triton_operator.api.importer import (
    CONFIG_MAP_LIMIT_BYTES,
    ModelFolder,
    completed_config,
    completion_needed,
    completion_summary,
    imported_model,
)
from triton_operator.cli import main
from triton_operator.local import tritonserver
from triton_operator.local.tritonserver import TritonNotInstalled
from triton_operator.protocol.names import REVISION_PARAMETER
from triton_operator.repository import read_repository


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    return write_repository(tmp_path / "models")


def _by_kind(text: str) -> dict[str, dict[str, dict]]:
    found: dict[str, dict[str, dict]] = {}
    for document in yaml.safe_load_all(text):
        found.setdefault(document["kind"], {})[document["metadata"]["name"]] = document
    return found


def test_a_repository_is_imported_whole(repository: Path) -> None:
    code, out, err = run("import", str(repository), "--server", "serving")
    assert code == 0, err
    imported = _by_kind(out)
    [server] = imported["TritonServer"].values()
    assert server["metadata"]["name"] == "serving"
    assert server["spec"] == {"backends": ["python"], "modelRepository": {"pvc": {"claimName": "serving-models"}}}
    models = imported["TritonModel"]
    assert sorted(models) == ["add-sub", "add-sub-twice", "big-weights", "custom-metrics", "labels", "square-int32"]
    assert all(model["spec"]["serverRef"] == {"name": "serving"} for model in models.values())
    assert models["add-sub"]["spec"]["modelName"] == "add_sub" and "modelName" not in models["labels"]["spec"]
    labels = models["labels"]["spec"]["files"]["configMapRef"]
    assert labels == {
        "name": "labels-files",
        "items": [{"key": "labels.txt", "path": "1/labels.txt"}, {"key": "model.py", "path": "1/model.py"}],
    }
    assert imported["ConfigMap"]["labels-files"]["data"]["labels.txt"] == LABELS
    steps = models["add-sub-twice"]["spec"]["config"]["ensembleScheduling"]["step"]
    assert [step["modelName"] for step in steps] == ["add_sub", "custom_metrics"], "an ensemble keeps its steps"
    assert "files" not in models["add-sub-twice"]["spec"], "an ensemble has no files"
    assert "files" not in models["big-weights"]["spec"] and "big-weights-files" not in imported["ConfigMap"]
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    assert (
        len(notes) == 1
        and "model 'big_weights' loads from the server's modelRepository: its files come to 2.0 MiB" in notes[0]
    )
    assert f"({repository / 'big_weights'}, with its version folders) into the repository as 'big_weights/'" in notes[0]
    assert f"--model-repository {repository}" in notes[0]


def test_import_then_validate_then_render_gives_back_every_config_and_file(repository: Path, tmp_path: Path) -> None:
    imported = tmp_path / "crs"
    code, _, err = run("import", str(repository), "--out", str(imported))
    assert code == 0, err
    assert sorted(p.name for p in imported.iterdir()) == sorted(
        [
            "triton.yaml",
            "add-sub.yaml",
            "add-sub-twice.yaml",
            "big-weights.yaml",
            "custom-metrics.yaml",
            "labels.yaml",
            "square-int32.yaml",
        ]
    )
    code, _, err = run("validate", str(imported))
    assert code == 0, err
    [warning] = err.splitlines()  # a string output's size is unknown: say how large an execution gets
    assert "labels.yaml:" in warning and "spec.sharedMemory.executionBytes: model 'labels'" in warning
    rendered = tmp_path / "rendered"
    code, _out, err = run("render", str(imported), "--out", str(rendered))
    assert code == 0, err
    for folder in sorted(p for p in repository.iterdir()):
        original = text_format.Parse((folder / "config.pbtxt").read_text(), ModelConfig())
        config = text_format.Parse((rendered / folder.name / "config.pbtxt").read_text(), ModelConfig())
        del config.parameters[REVISION_PARAMETER]
        assert config == original, folder.name
        if folder.name == "big_weights":
            continue  # its files stay in the repository
        files = {p.relative_to(folder) for p in folder.rglob("*") if p.is_file() and p.name != "config.pbtxt"}
        assert {
            p.relative_to(rendered / folder.name)
            for p in (rendered / folder.name).rglob("*")
            if p.is_file() and p.name != "config.pbtxt"
        } == files
        for path in files:
            assert (rendered / folder.name / path).read_bytes() == (folder / path).read_bytes(), f"{folder.name}/{path}"


def test_a_model_folder_or_its_config_brings_its_files(repository: Path) -> None:
    """A model folder, or the config.pbtxt in it: the model with its ConfigMap, no server."""
    for path in (repository / "labels", repository / "labels" / "config.pbtxt"):
        code, out, err = run("import", str(path))
        assert (code, err) == (0, ""), err
        imported = _by_kind(out)
        assert sorted(imported) == ["ConfigMap", "TritonModel"]
        assert imported["TritonModel"]["labels"]["spec"]["files"]["configMapRef"]["name"] == "labels-files"


def test_binary_files_go_into_binary_data_and_keys_stay_apart() -> None:
    files = {
        "1/model.py": b"print(1)\n",
        "2/model.py": b"print(2)\n",
        "1/table.bin": bytes(range(256)),
        "labels.txt": b"a\n",
    }
    model = imported_model(ModelFolder("m", 'backend: "python"', files), "triton")
    config_map, document = model.documents
    assert config_map["data"] == {"1.model.py": "print(1)\n", "2.model.py": "print(2)\n", "labels.txt": "a\n"}
    assert base64.b64decode(config_map["binaryData"]["table.bin"]) == bytes(range(256))
    items = document["spec"]["files"]["configMapRef"]["items"]
    assert {item["path"]: item["key"] for item in items} == {
        "1/model.py": "1.model.py",
        "2/model.py": "2.model.py",
        "1/table.bin": "table.bin",
        "labels.txt": "labels.txt",
    }


def test_files_up_to_what_a_config_map_holds_go_into_one() -> None:
    """The API server counts every key and value (binaryData decoded) against 1 MiB."""
    key = "weights.bin"
    at_limit = {"1/weights.bin": bytes(CONFIG_MAP_LIMIT_BYTES - len(key))}
    assert not imported_model(ModelFolder("m", 'backend: "python"', at_limit), "triton").from_repository
    over = {"1/weights.bin": bytes(CONFIG_MAP_LIMIT_BYTES - len(key) + 1)}
    model = imported_model(ModelFolder("m", 'backend: "python"', over), "triton")
    assert model.from_repository and [d["kind"] for d in model.documents] == ["TritonModel"]


def test_a_model_with_an_execution_environment_loads_from_the_repository() -> None:
    """A packed environment is tens of MiB (a venv-pack tarball with numpy: 31 MiB): no ConfigMap holds it."""
    config = (
        'backend: "python"\n'
        'parameters { key: "EXECUTION_ENV_PATH" value { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }'
    )
    files = {"1/model.py": b"import six\n", "env.tar.gz": bytes(2 << 20)}
    model = imported_model(ModelFolder("m", config, files, source="models/m"), "triton")
    [document] = model.documents
    assert model.from_repository and "files" not in document["spec"]
    assert document["spec"]["config"]["parameters"]["EXECUTION_ENV_PATH"] == {
        "stringValue": "$$TRITON_MODEL_DIRECTORY/env.tar.gz"
    }
    assert "more than a ConfigMap holds" in model.note and "'m/'" in model.note


def test_the_big_model_loads_from_the_repository_that_holds_its_weights(repository: Path) -> None:
    assert (repository / "big_weights/1/weights.bin").read_bytes() == weights()
    code, out, _ = run("import", str(repository / "big_weights"))
    assert code == 0 and "files" not in _by_kind(out)["TritonModel"]["big-weights"]["spec"]


def test_local_names_the_models_that_need_a_model_repository(repository: Path, tmp_path: Path) -> None:
    """Without --model-repository, a model that loads from the server's PVC or bucket cannot load: said before
    Triton starts."""
    assert run("import", str(repository), "--out", str(tmp_path / "crs"))[0] == 0
    code, _, err = run("local", str(tmp_path / "crs"), "--once", "--workdir", str(tmp_path / "work"))
    assert code == 2
    assert err.splitlines()[-1] == (
        "triton-operator local: big_weights loads from TritonServer/triton's modelRepository (PersistentVolumeClaim "
        "'triton-models'), which local mode cannot reach: give it a folder holding that model with "
        "--model-repository DIR"
    )


# model.py files: one that leaves its config to auto_complete_config, one that does not (its initialize would
# run for nothing), one naming it only in a comment and a string, one that does not parse.
COMPLETES = (
    b"class TritonPythonModel:\n    @staticmethod\n    def auto_complete_config(config):\n        return config\n"
)
INITIALIZES = b"class TritonPythonModel:\n    def initialize(self, args):\n        self.auto_complete = True\n"
MENTIONS = b"# auto_complete_config is not needed\nclass TritonPythonModel:\n    doc = 'auto_complete_config'\n"
UNPARSABLE = b"class TritonPythonModel:\n    def auto_complete_config(config)\n"


@pytest.mark.parametrize(
    ("config", "files", "reason"),
    [
        (None, {"1/model.py": b""}, "no config.pbtxt"),
        ('backend: "python"', {"1/model.py": COMPLETES}, "a python model whose config.pbtxt has no inputs"),
        ('backend: "python"', {"1/model.py": INITIALIZES}, ""),
        ('backend: "python"', {"1/model.py": MENTIONS}, ""),
        ('backend: "python"', {"1/model.py": UNPARSABLE}, ""),
        # Bound to a function rather than defined in the class: Triton finds it all the same.
        (
            'backend: "python"',
            {"1/model.py": b"class TritonPythonModel:\n    auto_complete_config = staticmethod(f)\n"},
            "a python model whose config.pbtxt has no inputs",
        ),
        # Only the model file counts: in each version folder, by the name the config gives it.
        ('backend: "python"', {"1/helper.py": COMPLETES, "1/model.py": INITIALIZES}, ""),
        (
            'backend: "python"',
            {"2/model.py": COMPLETES, "1/model.py": INITIALIZES},
            "a python model whose config.pbtxt has no inputs",
        ),
        (
            'backend: "python" default_model_filename: "main.py"',
            {"1/main.py": COMPLETES},
            "a python model whose config.pbtxt has no inputs",
        ),
        (
            'backend: "python" default_model_filename: "main.py"',
            {"1/main.py": INITIALIZES, "1/model.py": COMPLETES},
            "",
        ),
        (
            'backend: "python" input [{ name: "X" data_type: TYPE_FP32 dims: [1] }]',
            {"1/model.py": COMPLETES},
            "a python model whose config.pbtxt has no outputs",
        ),
        (
            'backend: "python" input [{ name: "X" data_type: TYPE_FP32 dims: [1] }] '
            'output [{ name: "Y" data_type: TYPE_FP32 dims: [1] }]',
            {"1/model.py": COMPLETES},
            "",
        ),
        ('backend: "python"', {}, ""),  # a config file alone: no model.py for Triton to ask
        ('backend: "onnxruntime"', {"1/model.onnx": b""}, ""),  # takes its tensors from the model file on the server
        ('platform: "ensemble"', {}, ""),
        ("max_batch_size: [oops", {"1/model.py": b""}, ""),  # imported_model says what is wrong
    ],
)
def test_which_models_triton_completes(config: str | None, files: dict[str, bytes], reason: str) -> None:
    assert completion_needed(ModelFolder("m", config, files)) == reason


def test_a_model_py_among_files_too_large_to_read_is_read_for_auto_complete_config(tmp_path: Path) -> None:
    """The weights beside it stay unread; model.py alone decides whether Triton completes the config."""
    for name, code in (("completes", COMPLETES), ("initializes", INITIALIZES)):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "1" / "model.py").write_bytes(code)
        (tmp_path / name / "config.pbtxt").write_text('backend: "python"')
        with (tmp_path / name / "1" / "weights.bin").open("wb") as weights:
            weights.truncate(CONFIG_MAP_LIMIT_BYTES + 1)
    folders = {folder.folder: folder for folder in read_repository(tmp_path).models}
    assert {name: (folder.files, set(folder.unread)) for name, folder in folders.items()} == {
        name: ({}, {"1/model.py", "1/weights.bin"}) for name in ("completes", "initializes")
    }
    assert {name: completion_needed(folder) for name, folder in folders.items()} == {
        "completes": "a python model whose config.pbtxt has no inputs",
        "initializes": "",
    }


def _config(text: str) -> ModelConfig:
    return text_format.Parse(text, ModelConfig())


# What Triton answered for python_backend's batch_auto_complete example loaded without a config.pbtxt.
TRITON_COMPLETED = """
name: "batch_auto_complete" version_policy { latest { num_versions: 1 } } max_batch_size: 4
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: 4 }] output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: 4 }]
instance_group [{ name: "batch_auto_complete" count: 1 kind: KIND_CPU }] default_model_filename: "model.py"
dynamic_batching { preferred_batch_size: 4 }
optimization { input_pinned_memory { enable: true } output_pinned_memory { enable: true } } backend: "python"
"""


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        # What Triton fills on every load stays out: the model's own server fills it for its machine.
        (
            None,
            'max_batch_size: 4 input [{ name: "INPUT0" data_type: TYPE_FP32 dims: 4 }] '
            'output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: 4 }] dynamic_batching {} backend: "python"',
        ),
        # What config.pbtxt wrote of it stays: its name, its instance groups, its preferred batch sizes.
        (
            'name: "mine" backend: "python" instance_group [{ count: 2 kind: KIND_GPU }] '
            "dynamic_batching { preferred_batch_size: 4 }",
            'name: "mine" max_batch_size: 4 input [{ name: "INPUT0" data_type: TYPE_FP32 dims: 4 }] '
            'output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: 4 }] '
            "instance_group [{ count: 2 kind: KIND_GPU }] dynamic_batching { preferred_batch_size: 4 } "
            'backend: "python"',
        ),
    ],
)
def test_a_completed_config_keeps_what_the_model_and_its_config_say(written: str | None, expected: str) -> None:
    assert completed_config(written, _config(TRITON_COMPLETED)) == _config(expected)


def test_a_preferred_batch_size_other_than_the_max_is_the_models_own() -> None:
    completed = _config("max_batch_size: 8 dynamic_batching { preferred_batch_size: 4 }")
    assert list(completed_config(None, completed).dynamic_batching.preferred_batch_size) == [4]


def test_the_summary_says_what_auto_complete_gave() -> None:
    assert completion_summary(_config(TRITON_COMPLETED)) == "1 input, 1 output, maxBatchSize 4, dynamicBatching"
    assert (
        completion_summary(_config("model_transaction_policy { decoupled: true }"))
        == "0 inputs, 0 outputs, maxBatchSize 0, decoupled"
    )


def test_no_complete_imports_configs_as_written_and_skips_folders_without(tmp_path: Path) -> None:
    """For a machine without tritonserver: nothing starts one."""
    repository = write_auto_complete_repository(tmp_path / "models", partial=True)
    code, out, err = run("import", str(repository), "--no-complete")
    assert code == 0, err
    assert (
        f"warning: {repository / 'batch_auto_complete'}: no config.pbtxt, and --no-complete leaves it so: skipped"
        in err
    )
    [model] = _by_kind(out)["TritonModel"].values()
    assert model["spec"]["config"] == {"instanceGroup": [{"count": 2, "kind": "KIND_CPU"}], "backend": "python"}


def test_without_tritonserver_the_error_names_the_models_and_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def not_installed() -> None:
        raise TritonNotInstalled("no tritonserver here: install the local extra")

    monkeypatch.setattr(tritonserver, "find_tritonserver", not_installed)
    repository = write_auto_complete_repository(tmp_path / "models")
    assert main(["import", str(repository)]) == 1
    err = capsys.readouterr().err
    assert "batch_auto_complete, nobatch_auto_complete: their configs need Triton's auto-complete" in err
    assert "no tritonserver here" in err and "import with --no-complete" in err


@pytest.mark.parametrize(("named_by_a_cr", "warned"), [(False, True), (True, False)])
def test_a_repository_folder_to_complete_is_warned_of_only_when_no_cr_serves_it(
    tmp_path: Path, named_by_a_cr: bool, warned: bool
) -> None:
    """local --model-repository: a folder with no config.pbtxt needs import's auto-complete, unless a CR
    names its model (then the CR's whole config serves it, and the warning would send the user astray)."""
    from triton_operator.repository import repository_as_source
    from triton_operator.sources import Sources

    (tmp_path / "models" / "auto" / "1").mkdir(parents=True)
    (tmp_path / "models" / "auto" / "1" / "model.py").write_text("class TritonPythonModel: pass\n")
    crs = Sources(
        resources=[{"kind": "TritonModel", "metadata": {"name": "auto"}, "spec": {}}] if named_by_a_cr else []
    )
    found = repository_as_source(tmp_path / "models", crs, None).findings
    assert any("auto-complete must write its config" in finding.message for finding in found) == warned, found
