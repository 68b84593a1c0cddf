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
from triton_operator.decide import conditions

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
    [kustomization] = [
        d for d in guide_documents() if d["kind"] == "Kustomization" and d["apiVersion"].startswith("kustomize.toolkit")
    ]
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
    "unknown": (ready("Unknown", "", "no pod answered yet"), "Progressing", "no pod answered"),
}
FLUX_VERDICT = {"Healthy": "Current", "Progressing": "InProgress", "Degraded": "Failed"}
# Every reason Ready=False can carry, with the health it must read as.
REASON_HEALTH = {reason: "Progressing" for reason in conditions.PROGRESSING_REASONS} | {
    reason: "Degraded" for reason in conditions.DEGRADED_REASONS
}
# The constants of decide/conditions.py that are not reasons for False: condition types and reasons for True.
NOT_FAILURES = {
    conditions.READY,
    conditions.CONFIG_VALID,
    conditions.LOADED,
    conditions.MODELS_READY,
    conditions.SHARED_MEMORY_SUFFICIENT,
    conditions.CHILDREN_OWNED,
    conditions.KEY_SECRETS_VALID,
    conditions.OWNED,
    conditions.VALID,
    conditions.LOADED_EVERYWHERE,
    conditions.ALL_PODS_READY,
    conditions.SUFFICIENT,
    conditions.READY_REASON,
    # BatchingEffective reports on traffic and never feeds Ready, so it never makes an object unhealthy.
    conditions.BATCHING_EFFECTIVE,
    conditions.NOT_ENOUGH_TRAFFIC,
    conditions.DYNAMIC_BATCHING_OFF,
    # CrashedServer is True only, beside Loaded, whose reason (CrashedServer, Degraded) Ready carries.
    conditions.SERVER_DIED,
    # RolloutHealthy is read beside Ready (test_a_rolled_back_model_is_degraded_while_ready).
    conditions.ROLLOUT_HEALTHY,
    conditions.STABLE,
    conditions.PROMOTED,
    # Placed is a type; its reason for False, Unschedulable, is also Ready's while the model is on no server.
    conditions.PLACED,
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", CASES)
def test_argocd_and_flux_read_health_from_ready_and_the_observed_generation(kind: str, case: str) -> None:
    status, health, message_part = CASES[case]
    obj = resource(kind, generation=3, status=status)
    argocd_status, argocd_message = argocd_health(kind, obj)
    assert argocd_status == health and message_part in argocd_message, (argocd_status, argocd_message)
    assert flux_health(kind, obj) == FLUX_VERDICT[health]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reason", sorted(REASON_HEALTH))
def test_each_reason_the_operator_sets_reads_as_progressing_or_degraded(kind: str, reason: str) -> None:
    health = REASON_HEALTH[reason]
    obj = resource(kind, generation=3, status=ready("False", reason, f"the operator says {reason}"))
    assert argocd_health(kind, obj) == (health, f"the operator says {reason}")
    assert flux_health(kind, obj) == FLUX_VERDICT[health]


ROLLOUT_CASES = {
    "rolled back": ("False", "RolledBack", "Degraded"),
    "baking": ("Unknown", "Baking", "Progressing"),
    "holding for traffic": ("Unknown", "NotEnoughTraffic", "Progressing"),
    "promoted": ("True", "Promoted", "Healthy"),
}


@pytest.mark.parametrize("case", ROLLOUT_CASES)
def test_a_rolled_back_model_is_degraded_while_ready(case: str) -> None:
    """After a rollback Ready stays True (the previous revision serves); RolloutHealthy decides."""
    status, reason, health = ROLLOUT_CASES[case]
    model_status = ready("True", "Ready", "revision a is ready on 3 pods")
    model_status["conditions"].append(
        {"type": "RolloutHealthy", "status": status, "reason": reason, "message": f"the rollout says {reason}"}
    )
    obj = resource("TritonModel", generation=3, status=model_status)
    argocd_status, argocd_message = argocd_health("TritonModel", obj)
    assert argocd_status == health
    assert argocd_message == ("revision a is ready on 3 pods" if health == "Healthy" else f"the rollout says {reason}")
    assert flux_health("TritonModel", obj) == FLUX_VERDICT[health]


def test_every_reason_for_false_is_either_progressing_or_degraded() -> None:
    """A new reason in decide/conditions.py fails here until it is put in one of the two sets (and so in the checks)."""
    constants = {value for name, value in vars(conditions).items() if name.isupper() and isinstance(value, str)}
    assert constants - NOT_FAILURES == conditions.PROGRESSING_REASONS | conditions.DEGRADED_REASONS
    assert not conditions.PROGRESSING_REASONS & conditions.DEGRADED_REASONS


def test_the_guide_lists_exactly_the_progressing_reasons() -> None:
    """Both checks name the progressing reasons (anything else is Degraded): no stale name, none missing."""
    [lua_table] = re.findall(r"progressing_reasons = \{(.*?)\}", argocd_health_script("TritonServer"))
    assert set(re.findall(r"(\w+) = true", lua_table)) == conditions.PROGRESSING_REASONS
    [cel_list] = re.findall(r"c\.reason in \[(.*?)\]", flux_health_exprs("TritonServer")["inProgress"])
    assert set(re.findall(r"'(\w+)'", cel_list)) == conditions.PROGRESSING_REASONS
    for reason in REASON_HEALTH:
        assert f"`{reason}`" in GUIDE, f"docs/gitops.md does not explain {reason}"


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
