"""The operator's image: the Dockerfile passes hadolint and runs what the chart expects, as the chart's user."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from tests.conftest import ROOT
from tests.support.dockerfile import instructions


def test_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run([str(hadolint), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_builds_a_wheel_in_one_stage_and_installs_it_on_a_pinned_slim_base() -> None:
    bases = instructions("FROM")
    assert len(bases) == 2 and bases[0].endswith(" AS build")
    for base in bases:
        assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+( AS build)?", base), base
    assert any("pip wheel" in run for run in instructions("RUN"))
    assert any("pip install" in run and ".whl" in run for run in instructions("RUN"))
    assert instructions("COPY")[-1].startswith("--from=build ")


def test_the_image_runs_triton_operator_run_as_the_charts_numeric_user() -> None:
    [entrypoint] = instructions("ENTRYPOINT")
    assert json.loads(entrypoint) == ["triton-operator", "run"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["triton-operator"] == "triton_operator.cli:main"
    [user] = instructions("USER")
    uid, gid = (int(part) for part in user.split(":"))
    values = yaml.safe_load((ROOT / "charts/triton-operator/values.yaml").read_text())
    assert uid > 0 and (uid, gid) == (
        values["podSecurityContext"]["runAsUser"],
        values["podSecurityContext"]["runAsGroup"],
    )
