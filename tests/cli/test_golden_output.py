"""Rendering stays byte for byte what it was when the golden files were written: `validate`'s and
`render`'s output for the examples, for each of Triton's configs in tests/data imported and rendered,
and for a varied fleet. Speed work must not change what users get.

After an intended change of output, write the files anew and review the diff:
    python -m tests.cli.test_golden_output
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import EXAMPLES, ROOT
from tests.support.cli import run
from tests.support.fleet import TRITON_EXAMPLES, varied_fleet
from tests.support.resources import GPU_SERVER_YAML

GOLDEN = ROOT / "tests/data/golden"
FLEET_MODELS = 40
CASES = ["examples", "varied-fleet", *sorted(p.name.removesuffix(".pbtxt") for p in TRITON_EXAMPLES.glob("*.pbtxt"))]


def _run(work: Path, *argv: str) -> str:
    """The command's exit code, stdout and stderr as one text, with the work folder's and the clone's paths made
    neutral."""
    code, out, err = run(*argv)
    return f"exit {code}\n--- stdout\n{out}--- stderr\n{err}".replace(str(work), "<work>").replace(str(ROOT), "<root>")


def _inputs(case: str, work: Path) -> list[str]:
    """The files `validate` and `render` read for a case, written under `work` where they are made."""
    if case == "examples":
        return [str(EXAMPLES)]
    if case == "varied-fleet":
        fleet = work / "fleet.yaml"
        fleet.write_text(yaml.safe_dump_all(varied_fleet(FLEET_MODELS), sort_keys=False))
        return [str(fleet)]
    model, server = work / "model.yaml", work / "server.yaml"
    code, imported, err = run("import", str(TRITON_EXAMPLES / f"{case}.pbtxt"))
    assert code == 0, err
    model.write_text(imported)
    server.write_text(GPU_SERVER_YAML)
    return [str(model), str(server)]


def outputs(case: str, work: Path) -> dict[str, str]:
    """Every output of one case by file name: the imported model, validate's and render's output and
    every file render wrote."""
    work.mkdir(parents=True)
    inputs = _inputs(case, work)
    result = {
        "validate.txt": _run(work, "validate", *inputs),
        "render.txt": _run(work, "render", *inputs, "--out", str(work / "out"), "--control-key", "golden"),
    }
    if (work / "model.yaml").exists():
        result["imported.yaml"] = (work / "model.yaml").read_text()
    if (work / "out").exists():
        result |= {
            f"out/{p.relative_to(work / 'out')}": p.read_text()
            for p in sorted((work / "out").rglob("*"))
            if p.is_file()
        }
    return result


@pytest.mark.parametrize("case", CASES)
def test_output_is_unchanged(case: str, tmp_path: Path) -> None:
    golden = GOLDEN / case
    expected = {str(p.relative_to(golden)): p.read_text() for p in sorted(golden.rglob("*")) if p.is_file()}
    actual = outputs(case, tmp_path / "work")
    assert sorted(actual) == sorted(expected)
    for name, text in actual.items():
        assert text == expected[name], f"{case}/{name} changed"


def write_golden(tmp: Path) -> None:
    shutil.rmtree(GOLDEN, ignore_errors=True)
    for case in CASES:
        for name, text in outputs(case, tmp / case).items():
            path = GOLDEN / case / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        write_golden(Path(tmp))
    print(f"wrote {GOLDEN}", file=sys.stderr)
