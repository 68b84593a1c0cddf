"""The Helm chart rendered by the real helm binary the project installs (.ci/install-tools)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts/triton-operator"
HELM = shutil.which("helm") or str(ROOT / ".tools/bin/helm")


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if not Path(HELM).exists():
        pytest.fail("helm is missing: run .ci/install-tools (make test does)")
    return subprocess.run([HELM, *args], capture_output=True, text=True, check=check)


def render(*values: str) -> list[dict[str, Any]]:
    """Every object `helm template` renders, released as `ops` into namespace triton-system."""
    output = helm("template", "ops", str(CHART), "--namespace", "triton-system", *values).stdout
    return [document for document in yaml.safe_load_all(output) if document]
