"""What docs/gitops.md tells users to copy works: the Argo CD Lua health check, run with lupa, and
Flux's CEL health expressions, run with cel-python, judge the same objects alike; examples/ builds
with the real `kubectl kustomize`."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import celpy
import lupa
import pytest
import yaml

from tests.conftest import ROOT, example_documents

GUIDE = (ROOT / "docs/gitops.md").read_text()
KUBECTL = shutil.which("kubectl") or str(ROOT / ".tools/bin/kubectl")
KINDS = ("TritonServer", "TritonModel")


def guide_documents() -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", GUIDE, flags=re.DOTALL)
    return [document for block in blocks for document in yaml.safe_load_all(block) if document]


def argocd_health_script(kind: str) -> str:
    [config] = [d for d in guide_documents() if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "argocd-cm"]
    return config["data"][f"resource.customizations.health.triton-operator.io_{kind}"]


def flux_health_exprs(kind: str) -> dict[str, str]:
    [kustomization] = [d for d in guide_documents() if d["kind"] == "Kustomization" and d["apiVersion"].startswith("kustomize.toolkit")]
    [exprs] = [e for e in kustomization["spec"]["healthCheckExprs"] if e["kind"] == kind]
    assert exprs["apiVersion"] == "triton-operator.io/v1alpha1"
    return exprs


def argocd_health(kind: str, obj: dict[str, Any]) -> tuple[str, str]:
    """Argo CD's contract: the script sees the object as the global `obj` and returns {status, message}."""
    lua = lupa.LuaRuntime()
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(argocd_health_script(kind))
    return result["status"], result["message"]


def flux_health(kind: str, obj: dict[str, Any]) -> str:
    """Flux's contract: inProgress, then failed, then current; none matching is still in progress."""
    environment = celpy.Environment()
    activation = {"self": celpy.json_to_cel(obj)}
    exprs = flux_health_exprs(kind)
    for field, verdict in (("inProgress", "InProgress"), ("failed", "Failed"), ("current", "Current")):
        if environment.program(environment.compile(exprs[field])).evaluate(activation):
            return verdict
    return "InProgress"


def resource(kind: str, generation: int, status: dict[str, Any] | None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": "triton", "namespace": "serving", "generation": generation},
        "spec": {},
    }
    if status is not None:
        obj["status"] = status
    return obj


def ready(status: str, reason: str, message: str, observed: int = 3) -> dict[str, Any]:
    return {
        "observedGeneration": observed,
        "conditions": [
            {"type": "ConfigValid", "status": "True", "reason": "Valid", "message": ""},
            {"type": "Ready", "status": status, "reason": reason, "message": message},
        ],
    }


CASES = {
    "no status yet": (None, "Progressing", "Waiting for the operator"),
    "an older generation observed": (ready("True", "Ready", "2/2 replicas", observed=2), "Progressing", "generation 3"),
    "no Ready condition": ({"observedGeneration": 3, "conditions": []}, "Progressing", "No Ready condition"),
    "ready": (ready("True", "Ready", "2/2 replicas ready"), "Healthy", "2/2 replicas ready"),
    "loading": (ready("False", "Loading", "1/2 replicas have the model"), "Progressing", "1/2 replicas"),
    "rolling out": (ready("False", "RollingOut", "pods are being replaced"), "Progressing", "replaced"),
    "unknown": (ready("Unknown", "Pending", "no pod answered yet"), "Progressing", "no pod answered"),
    "failed load": (
        ready("False", "LoadFailed", "failed to load 'add_sub': Unable to initialize shared memory key"),
        "Degraded",
        "Unable to initialize shared memory key",
    ),
    "refused config": (ready("False", "ConfigInvalid", "preferredBatchSize 32 exceeds maxBatchSize 16"), "Degraded", "exceeds maxBatchSize"),
}
FLUX_VERDICT = {"Healthy": "Current", "Progressing": "InProgress", "Degraded": "Failed"}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", CASES)
def test_argocd_and_flux_read_health_from_ready_and_the_observed_generation(kind: str, case: str) -> None:
    status, health, message_part = CASES[case]
    obj = resource(kind, generation=3, status=status)
    argocd_status, argocd_message = argocd_health(kind, obj)
    assert argocd_status == health and message_part in argocd_message, (argocd_status, argocd_message)
    assert flux_health(kind, obj) == FLUX_VERDICT[health]


def test_both_kinds_get_the_same_argocd_script() -> None:
    assert argocd_health_script("TritonServer") == argocd_health_script("TritonModel")


def test_the_guide_promises_the_operator_never_writes_spec() -> None:
    assert "## The operator never writes spec" in GUIDE


def test_examples_build_with_kubectl_kustomize() -> None:
    if not Path(KUBECTL).exists():
        pytest.fail("kubectl is missing: run .ci/install-tools (make test does)")
    result = subprocess.run([KUBECTL, "kustomize", str(ROOT / "examples")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    built = [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(result.stdout) if d]
    listed = [(d["kind"], d["metadata"]["name"]) for d in example_documents() if d["kind"] != "Kustomization"]
    assert sorted(built) == sorted(listed), "examples/kustomization.yaml must list every example file"
