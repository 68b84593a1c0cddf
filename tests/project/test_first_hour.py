"""A new user's first commands: `make demo` installs what the demo needs and not the test toolchain, in the
venv `make test` fills too (either may come first), and every `triton-operator` command README and docs/ show
runs as written after README's set-up commands."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _planned(venv: Path, *targets: str) -> str:
    """What `make` would run for `targets` with its venv at `venv` (a dry run)."""
    result = subprocess.run(
        ["make", "-n", f"VENV={venv}", *targets], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _pip_installs(plan: str) -> list[str]:
    return re.findall(r"pip install --quiet -e \"(\.[^\"]*)\"", plan)


def test_make_demo_installs_the_package_with_local_mode_not_the_test_toolchain(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.fail("make is missing: README's set-up needs it")
    venv = tmp_path / "venv"
    assert _pip_installs(_planned(venv, "demo")) == [".[local]"]
    # After `make demo`, `make test` still installs the test toolchain into the same venv.
    venv.mkdir()
    (venv / ".installed-local").touch()
    assert _pip_installs(_planned(venv, f"{venv}/.installed")) == [".[test]"]
    # After `make test`, whose install holds the demo's, `make demo` installs nothing.
    (venv / ".installed").touch()
    (venv / ".installed-local").touch()
    plan = _planned(venv, "demo")
    assert _pip_installs(plan) == [] and "triton-operator local examples --once" in plan, plan


def _shell_blocks(text: str) -> list[list[str]]:
    """A page's ```sh blocks, each as its command lines (comments and continuation lines joined)."""
    blocks = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        joined = block.replace("\\\n", " ")
        blocks.append([line.split("  #")[0].strip() for line in joined.splitlines() if line.strip()])
    return blocks


def test_every_triton_operator_command_the_docs_show_runs_after_readme_s_set_up_commands() -> None:
    """README's set-up block's commands but `make` (which has run: .venv exists) put triton-operator on PATH, and
    each command README or a docs/ page shows names a subcommand that takes its flags (its --help answers)."""
    venv_bin = ROOT / ".venv" / "bin"
    if not (venv_bin / "triton-operator").exists():
        pytest.fail("no .venv/bin/triton-operator: run make demo (or make test) first")
    set_up, *others = _shell_blocks(README.read_text())
    activation = [command for command in set_up if not command.startswith("make ")]
    readme_commands = [c for block in others for c in block if c.startswith("triton-operator ")]
    assert len(readme_commands) >= 5, readme_commands  # the tour's local, validate, render and import at least
    docs_blocks = [block for page in DOCS for block in _shell_blocks(page.read_text())]
    commands = readme_commands + [c for block in docs_blocks for c in block if c.startswith("triton-operator ")]
    subcommands = sorted({command.split()[1] for command in commands})
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p).resolve() != venv_bin.resolve())
    helps = [f"triton-operator {sub} --help >/dev/null" for sub in subcommands]
    script = " && ".join([*activation, "command -v triton-operator", *helps])
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=ROOT,
        env={**os.environ, "PATH": path, "PYTHONPATH": str(ROOT / "operator")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"{script}\n{result.stdout}{result.stderr}"
    assert Path(result.stdout.splitlines()[0]).parent.resolve() == venv_bin.resolve(), result.stdout
