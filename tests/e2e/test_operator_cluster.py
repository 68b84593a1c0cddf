"""The operator's flow on a real cluster (kind): the server's pods get the model and the readiness
gate, a config edit reloads in place, a deleted model is unloaded before it goes.

Runs `triton-operator run -A` from this checkout against the context in TRITON_OPERATOR_E2E_CONTEXT.
The one image the pods need is Triton's: TRITON_OPERATOR_E2E_TRITON_IMAGE (default NVIDIA's
24.10 image; load it into kind first with `kind load docker-image`). Needs nodes that run it: on the
control plane built here (no kubelet yet) it says NOT RUN.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.e2e import E2E_MARKS, NEEDS_NODES, current, kubectl
from tests.support.resources import FILES, MODEL, SERVER
from triton_operator.api.server import DEFAULT_IMAGE

IMAGE = os.environ.get("TRITON_OPERATOR_E2E_TRITON_IMAGE", DEFAULT_IMAGE)
NAMESPACE = "triton-operator-e2e"

pytestmark = [*E2E_MARKS, NEEDS_NODES, pytest.mark.triton]  # Triton's image runs as the server's pods


@pytest.fixture(scope="module")
def operator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    kubeconfig = tmp_path_factory.mktemp("kube") / "config"
    kubeconfig.write_text(kubectl("config", "view", "--minify", "--flatten", "--context", current().context).stdout)
    kubectl("create", "namespace", NAMESPACE, check=False)
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "TRITON_OPERATOR_METRICS_PORT": "0",
        "TRITON_OPERATOR_LIVENESS_PORT": "0",
    }
    process = subprocess.Popen([sys.executable, "-m", "triton_operator.cli", "run", "-n", NAMESPACE], env=env)
    try:
        yield
    finally:
        kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=300s", check=False, timeout=330)
        process.terminate()
        process.wait(timeout=60)


def _apply(tmp_path: Path, *objects: dict[str, Any]) -> None:
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all([{**o, "metadata": {**o["metadata"], "namespace": NAMESPACE}} for o in objects]))
    kubectl("apply", "-f", str(path))


def _status(kind: str, name: str) -> dict[str, Any]:
    return json.loads(kubectl("get", kind, name, "-n", NAMESPACE, "-o", "json").stdout).get("status", {})


def test_model_served_reloaded_and_unloaded(operator: None, tmp_path: Path) -> None:
    server = {**SERVER, "spec": {**SERVER["spec"], "image": IMAGE}}
    _apply(tmp_path, server, FILES, MODEL)
    kubectl("wait", "-n", NAMESPACE, "--for=condition=Ready", "tritonmodel/add", "--timeout=900s", timeout=930)
    # Ready once a pod serves it; both pods load it as they join.
    kubectl("wait", "-n", NAMESPACE, "--for=jsonpath={.status.replicas}=2/2", "tritonmodel/add", "--timeout=300s",
            timeout=330)  # fmt: skip
    pods = json.loads(
        kubectl("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/instance=triton", "-o", "json").stdout
    )["items"]
    assert all(
        any(
            c["type"] == "triton-operator.io/models-ready" and c["status"] == "True"
            for c in p["status"].get("conditions", [])
        )
        for p in pods
    )
    first = _status("tritonmodel", "add")["configHash"]
    kubectl(
        "patch",
        "tritonmodel",
        "add",
        "-n",
        NAMESPACE,
        "--type=merge",
        "-p",
        '{"spec":{"config":{"dynamicBatching":{"maxQueueDelayMicroseconds":200}}}}',
    )
    deadline = time.monotonic() + 300
    while _status("tritonmodel", "add").get("configHash") == first and time.monotonic() < deadline:
        time.sleep(1)
    kubectl("wait", "-n", NAMESPACE, "--for=condition=Ready", "tritonmodel/add", "--timeout=300s", timeout=330)
    assert _status("tritonmodel", "add")["configHash"] != first
    restarts = {p["metadata"]["name"] for p in pods}
    after = {
        p["metadata"]["name"]
        for p in json.loads(
            kubectl("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/instance=triton", "-o", "json").stdout
        )["items"]
    }
    assert after == restarts  # an in-place reload: the same pods
    kubectl("delete", "tritonmodel", "add", "-n", NAMESPACE, "--timeout=300s", timeout=330)
    assert _status("tritonserver", "triton").get("managedModels") == []
