"""Against a real Kubernetes API server (kind): the CRDs install (structure, CEL compile and cost
checks happen there), the examples and the rendered manifests are accepted, and a bad CR is
refused by the CRD's CEL rules with their message.

Skips unless TRITON_OPERATOR_E2E_CONTEXT names a kubectl context of a test cluster; it refuses
any context not named for tests (kind-*, *test*), so it never touches a real cluster by mistake.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import EXAMPLES, ROOT
from tests.support.e2e import E2E_MARKS, kubectl
from triton_operator.cli import main

pytestmark = E2E_MARKS


@pytest.fixture(scope="module", autouse=True)
def crds() -> None:
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    for path in (ROOT / "crds").glob("*.yaml"):
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")


def test_examples_are_accepted() -> None:
    result = kubectl("apply", "--dry-run=server", "-f", str(EXAMPLES), check=False)
    assert result.returncode == 0, result.stderr


def test_rendered_manifests_are_accepted(tmp_path: Path) -> None:
    assert main(["render", str(EXAMPLES), "--out", str(tmp_path), "--control-key", "e2e"]) == 0
    result = kubectl("apply", "--dry-run=server", "-f", str(tmp_path / "manifests.yaml"), check=False)
    assert result.returncode == 0, result.stderr


def test_cel_rules_refuse_a_bad_model(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "triton-operator.io/v1alpha1",
                "kind": "TritonModel",
                "metadata": {"name": "bad"},
                "spec": {
                    "serverRef": {"name": "triton"},
                    "config": {"backend": "python", "maxBatchSize": 4, "dynamicBatching": {"preferredBatchSize": [8]}},
                },
            }
        )
    )
    result = kubectl("apply", "--dry-run=server", "-f", str(bad), check=False)
    assert result.returncode != 0
    assert "preferredBatchSize entries must not exceed maxBatchSize" in result.stderr
