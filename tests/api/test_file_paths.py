"""The paths of a model's files (a TritonModel's spec.files items, the files import and local find in a
repository): one spelling for each, none over the rendered config.pbtxt or under another file, none past
the file system's limits (a name of 255 bytes, a path of 4096). Refused by pydantic and by the CRD's CEL
rules alike, with the path named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run
from tests.support.crd_check import crd_errors
from tests.support.repository import LABELS_CODE, LABELS_CONFIG
from tests.support.resources import BASE_CONFIG, model_document
from triton_operator.api.parse import parse_resources

ITEMS = "spec.files.configMapRef.items"
LONG_NAME = "n" * 256
LONG_PATH = "/".join(["d" * 200] * 21) + "/model.py"  # 4,229 bytes
LONG_UTF8_PATH = "1/" + "/".join(["é" * 100] * 21)  # 2,122 characters, 4,222 bytes


def _model(*paths: str) -> dict[str, Any]:
    items = [{"key": f"k{index}", "path": path} for index, path in enumerate(paths)]
    spec = {"serverRef": {"name": "a"}, "config": BASE_CONFIG, "files": {"configMapRef": {"name": "f", "items": items}}}
    return {**model_document({}), "spec": spec}


@pytest.mark.parametrize(
    ("paths", "where", "words", "cel"),
    [
        (("1/model.py", "config.pbtxt/x"), f"{ITEMS}.1.path", "'config.pbtxt/x' is under config.pbtxt", True),
        (("1/model.py", "1//model.py"), f"{ITEMS}.1.path", "'1//model.py' has an empty folder name", True),
        (("1/model.py", "1/"), f"{ITEMS}.1.path", "'1/' has an empty folder name", True),
        (("1/model.py", "1/model.py/x"), ITEMS, "'1/model.py/x' is under '1/model.py', a file", False),
        (
            ("1/model.py", f"1/{LONG_NAME}"),
            f"{ITEMS}.1.path",
            f"'{LONG_NAME[:20]}'... in '1/{LONG_NAME[:18]}'... is 256 bytes",
            True,
        ),
        (("1/model.py", f"1/{'é' * 128}"), f"{ITEMS}.1.path", "is 256 bytes; a file or folder name", False),
        (("1/model.py", LONG_UTF8_PATH), f"{ITEMS}.1.path", "is 4222 bytes; a path holds at most 4096", False),
        (("1/model.py", LONG_PATH), f"{ITEMS}.1.path", "at most 4096", True),
    ],
    ids=[
        "under-config",
        "double-slash",
        "trailing-slash",
        "under-a-file",
        "long-name",
        "long-utf8-name",
        "long-utf8-path",
        "long-path",
    ],
)
def test_a_file_path_of_two_spellings_over_another_or_too_long_is_refused(
    paths: tuple[str, ...], where: str, words: str, cel: bool
) -> None:
    document = _model(*paths)
    _, models, found = parse_resources([document])
    assert models == []
    assert any(f.where == f"TritonModel/default/m: {where}" and words in f.message for f in found), found
    assert bool(crd_errors(document)) == cel


def test_paths_a_model_takes_pass_both() -> None:
    document = _model("1/model.py", "1/model.pyc", "labels.txt", "1/sub/model.py", f"1/{'n' * 255}")
    assert crd_errors(document) == []
    _, models, found = parse_resources([document])
    assert len(models) == 1 and found == []


def test_a_folder_named_config_pbtxt_in_a_repository_is_refused_naming_its_files(tmp_path: Path) -> None:
    model = tmp_path / "labels"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(LABELS_CODE)
    (model / "config.pbtxt").mkdir()
    (model / "config.pbtxt" / "x").write_text(LABELS_CONFIG)
    code, out, err = run("import", str(model), "--no-complete")
    assert (code, out) == (1, "")
    assert f"error: {model / 'config.pbtxt' / 'x'}: 'config.pbtxt/x' is under config.pbtxt" in err, err
