"""`triton-operator import` of a whole model repository: a TritonModel per model, its files in a ConfigMap
(binaryData for bytes), the TritonServer its models need, and what is too big for a ConfigMap left to the
server's modelRepository. Round trip: import, then render, gives back each config.pbtxt and every file."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from google.protobuf import text_format

from tests.support.cli import run
from tests.support.repository import LABELS, weights, write_repository
from triton_operator.api.importer import CONFIG_MAP_LIMIT_BYTES, ModelFolder, imported_model
from triton_operator.api.modelconfig import ModelConfig
from triton_operator.protocol.names import REVISION_PARAMETER


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
    assert labels == {"name": "labels-files", "items": [{"key": "labels.txt", "path": "1/labels.txt"}, {"key": "model.py", "path": "1/model.py"}]}
    assert imported["ConfigMap"]["labels-files"]["data"]["labels.txt"] == LABELS
    steps = models["add-sub-twice"]["spec"]["config"]["ensembleScheduling"]["step"]
    assert [step["modelName"] for step in steps] == ["add_sub", "custom_metrics"], "an ensemble keeps its steps"
    assert "files" not in models["add-sub-twice"]["spec"], "an ensemble has no files"
    assert "files" not in models["big-weights"]["spec"] and "big-weights-files" not in imported["ConfigMap"]
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "model 'big_weights' loads from the server's modelRepository: its files come to 2.0 MiB" in notes[0]
    assert f"({repository / 'big_weights'}, with its version folders) into the repository as 'big_weights/'" in notes[0]
    assert f"--model-repository {repository}" in notes[0]


def test_import_then_validate_then_render_gives_back_every_config_and_file(repository: Path, tmp_path: Path) -> None:
    imported = tmp_path / "crs"
    code, out, err = run("import", str(repository), "--out", str(imported))
    assert code == 0, err
    assert sorted(p.name for p in imported.iterdir()) == sorted(
        ["triton.yaml", "add-sub.yaml", "add-sub-twice.yaml", "big-weights.yaml", "custom-metrics.yaml", "labels.yaml", "square-int32.yaml"]
    )
    code, out, err = run("validate", str(imported))
    assert code == 0, err
    [warning] = err.splitlines()  # a string output's size is unknown: say how large an execution gets
    assert "labels.yaml:" in warning and "spec.sharedMemory.executionBytes: model 'labels'" in warning
    rendered = tmp_path / "rendered"
    code, out, err = run("render", str(imported), "--out", str(rendered))
    assert code == 0, err
    for folder in sorted(p for p in repository.iterdir()):
        original = text_format.Parse((folder / "config.pbtxt").read_text(), ModelConfig())
        config = text_format.Parse((rendered / folder.name / "config.pbtxt").read_text(), ModelConfig())
        del config.parameters[REVISION_PARAMETER]
        assert config == original, folder.name
        if folder.name == "big_weights":
            continue  # its files stay in the repository
        files = {p.relative_to(folder) for p in folder.rglob("*") if p.is_file() and p.name != "config.pbtxt"}
        assert {p.relative_to(rendered / folder.name) for p in (rendered / folder.name).rglob("*") if p.is_file() and p.name != "config.pbtxt"} == files
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
    files = {"1/model.py": b"print(1)\n", "2/model.py": b"print(2)\n", "1/table.bin": bytes(range(256)), "labels.txt": b"a\n"}
    model = imported_model(ModelFolder("m", 'backend: "python"', files), "triton")
    config_map, document = model.documents
    assert config_map["data"] == {"1.model.py": "print(1)\n", "2.model.py": "print(2)\n", "labels.txt": "a\n"}
    assert base64.b64decode(config_map["binaryData"]["table.bin"]) == bytes(range(256))
    items = document["spec"]["files"]["configMapRef"]["items"]
    assert {item["path"]: item["key"] for item in items} == {"1/model.py": "1.model.py", "2/model.py": "2.model.py", "1/table.bin": "table.bin", "labels.txt": "labels.txt"}


def test_files_up_to_what_a_config_map_holds_go_into_one() -> None:
    """The API server counts every key and value (binaryData decoded) against 1 MiB."""
    key = "weights.bin"
    at_limit = {"1/weights.bin": bytes(CONFIG_MAP_LIMIT_BYTES - len(key))}
    assert not imported_model(ModelFolder("m", 'backend: "python"', at_limit), "triton").from_repository
    over = {"1/weights.bin": bytes(CONFIG_MAP_LIMIT_BYTES - len(key) + 1)}
    model = imported_model(ModelFolder("m", 'backend: "python"', over), "triton")
    assert model.from_repository and [d["kind"] for d in model.documents] == ["TritonModel"]


def test_the_big_model_loads_from_the_repository_that_holds_its_weights(repository: Path) -> None:
    assert (repository / "big_weights/1/weights.bin").read_bytes() == weights()
    code, out, _ = run("import", str(repository / "big_weights"))
    assert code == 0 and "files" not in _by_kind(out)["TritonModel"]["big-weights"]["spec"]


def test_local_names_the_models_that_need_a_model_repository(repository: Path, tmp_path: Path) -> None:
    """Without --model-repository, a model that loads from the server's PVC or bucket cannot load: said before Triton starts."""
    assert run("import", str(repository), "--out", str(tmp_path / "crs"))[0] == 0
    code, _, err = run("local", str(tmp_path / "crs"), "--once", "--workdir", str(tmp_path / "work"))
    assert code == 2
    assert err.splitlines()[-1] == (
        "triton-operator local: big_weights loads from TritonServer/triton's modelRepository (PersistentVolumeClaim "
        "'triton-models'), which local mode cannot reach: give it a folder holding that model with --model-repository DIR"
    )
