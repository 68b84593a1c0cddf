"""`make lint` reaches every Python file of the repository, examples/ included (users copy its clients), and
mypy checks the example clients as it checks the package."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.conftest import ROOT


def _python_files() -> list[Path]:
    """The repository's Python files, tracked or new, as git sees them (ignored build output left out)."""
    if shutil.which("git") is None:
        pytest.fail("git is missing: the repository's files are listed with git ls-files")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return [Path(line) for line in listed.stdout.splitlines()]


def _lint_plan(tmp_path: Path) -> list[str]:
    result = subprocess.run(
        ["make", "-n", f"VENV={tmp_path}", "lint"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()


def _uncovered(files: list[Path], paths: list[str]) -> list[str]:
    return [str(f) for f in files if not any(f == Path(p) or Path(p) in f.parents for p in paths)]


def test_ruff_checks_and_formats_every_python_file(tmp_path: Path) -> None:
    files = _python_files()
    assert any(f.parts[0] == "examples" for f in files), files
    plan = _lint_plan(tmp_path)
    for command in (f"{tmp_path}/bin/ruff check ", f"{tmp_path}/bin/ruff format --check "):
        [line] = [line for line in plan if line.startswith(command)]
        paths = line.removeprefix(command).split()
        assert _uncovered(files, paths) == [], f"`make lint` runs {line!r}, which leaves these out"


def test_mypy_checks_the_package_and_the_example_clients(tmp_path: Path) -> None:
    assert f"{tmp_path}/bin/mypy" in _lint_plan(tmp_path)
    checked = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    clients = [f for f in _python_files() if f.parts[:2] == ("examples", "clients")]
    assert clients and _uncovered(clients, checked) == []
    assert _uncovered([Path("operator/triton_operator/__init__.py")], checked) == []
