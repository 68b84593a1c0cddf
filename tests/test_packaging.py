"""The Dockerfile passes hadolint, and the Helm chart lints and carries the generated CRDs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

HELM = shutil.which("helm") or str(ROOT / ".tools/bin/helm")


def test_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run([str(hadolint), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def helm() -> str:
    if not Path(HELM).exists():
        pytest.fail("helm is missing: run .ci/install-tools (make test does)")
    return HELM


def test_chart_lints(helm: str) -> None:
    # Not --strict yet: the chart holds only the CRDs until the operator's own Deployment lands.
    result = subprocess.run([helm, "lint", str(ROOT / "charts/triton-operator")], capture_output=True, text=True)
    assert result.returncode == 0 and "[ERROR]" not in result.stdout, result.stdout + result.stderr


def test_chart_installs_the_generated_crds(helm: str) -> None:
    result = subprocess.run([helm, "template", "t", str(ROOT / "charts/triton-operator"), "--include-crds"], capture_output=True, text=True, check=True)
    rendered = {d["metadata"]["name"]: d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "CustomResourceDefinition"}
    generated = {p.name: yaml.safe_load(p.read_text()) for p in (ROOT / "crds").glob("*.yaml")}
    assert sorted(rendered) == sorted(crd["metadata"]["name"] for crd in generated.values())
    for crd in generated.values():
        assert rendered[crd["metadata"]["name"]] == crd
