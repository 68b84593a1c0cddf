"""The operator installed as README says, on the control plane built here (or your test cluster): its
chart's Deployment runs the operator as a pod under the chart's ServiceAccount (RBAC enforced by the
API server), the examples are served by Triton pods the real Deployment controller made, a request
through the Service's ClusterIP is answered right, and deleting them leaves nothing behind.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conftest import EXAMPLES
from tests.support.e2e import E2E_MARKS, NEEDS_NODES, current, kubectl

pytestmark = [*E2E_MARKS, NEEDS_NODES, pytest.mark.triton]
OPERATOR = "system:serviceaccount:triton-system:triton-operator"  # the chart's ServiceAccount
SERVE_SECONDS = 300  # two Triton pods scheduled, started, and four python models loaded on each


@pytest.fixture(scope="module")
def installed(operator_installed: None) -> Iterator[None]:
    """The operator README installs; the examples deleted at the end, whatever a test left."""
    try:
        yield
    finally:
        kubectl("delete", "-k", str(EXAMPLES), "--ignore-not-found", "--timeout=120s", check=False, timeout=180)


def _items(*args: str) -> list[dict[str, Any]]:
    return json.loads(kubectl("get", *args, "-o", "json").stdout)["items"]  # type: ignore[no-any-return]


def _add_sub(inputs: tuple[np.ndarray, np.ndarray], client: Any, module: Any) -> tuple[np.ndarray, np.ndarray]:
    tensors = []
    for name, value in zip(("INPUT0", "INPUT1"), inputs, strict=True):
        tensor = module.InferInput(name, list(value.shape), "FP32")
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    result = client.infer("add_sub", tensors)
    return result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")


def test_the_examples_are_served_through_the_cluster_ip(installed: None) -> None:
    kubectl("apply", "-k", str(EXAMPLES))
    waited = kubectl(
        "wait", "--for=condition=Ready", "tritonmodel", "--all", f"--timeout={SERVE_SECONDS}s",
        check=False, timeout=SERVE_SECONDS + 30,
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr + kubectl("get", "tritonmodels,pods", "-o", "wide").stdout
    models = _items("tritonmodels")
    assert {m["metadata"]["name"] for m in models} == {"add-sub", "ragged-sum", "shm-scale", "warm-identity"}
    assert all(m["status"]["replicas"] == "2/2" for m in models), [m["status"] for m in models]
    # In the Service once their container's readiness probe passes too (the node probes every second).
    kubectl("wait", "--for=condition=Ready", "pods", "-l", "app.kubernetes.io/instance=triton", "--timeout=60s")
    pods = _items("pods", "-l", "app.kubernetes.io/instance=triton")
    assert len(pods) == 2 and len({p["status"]["podIP"] for p in pods}) == 2
    for pod in pods:
        conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert conditions["triton-operator.io/models-ready"] == "True" and conditions["Ready"] == "True"
    service = json.loads(kubectl("get", "service", "triton", "-o", "json").stdout)["spec"]["clusterIP"]
    inputs = (np.arange(8, dtype=np.float32).reshape(2, 4), np.full((2, 4), 10, dtype=np.float32))
    with httpclient.InferenceServerClient(f"{service}:8000") as client:
        added, subtracted = _add_sub(inputs, client, httpclient)
    assert (added == inputs[0] + inputs[1]).all() and (subtracted == inputs[0] - inputs[1]).all()
    with grpcclient.InferenceServerClient(f"{service}:8001") as client:
        added, _ = _add_sub(inputs, client, grpcclient)
    assert (added == inputs[0] + inputs[1]).all()


def _missing(sent: Any, stored: Any, path: str = "status") -> list[str]:
    """The leaves of a merge patch's `sent` that `stored` does not hold (lists are sent whole; null deletes)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path]
        return [
            missing
            for key, value in sent.items()
            if value is not None
            for missing in _missing(value, stored.get(key), f"{path}.{key}")
        ]
    return [] if sent == stored else [path]


def test_every_status_the_operator_wrote_is_stored_whole(installed: None) -> None:
    """The API server prunes what a CRD's schema lacks without a word: every status patch the operator
    sent while serving the examples (the API server's own audit log, request beside response) is in
    the object the API server stored."""
    log = current().audit_log
    if log is None:
        pytest.skip("NOT RUN: the audit log is the built control plane's")
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    writes = [
        event
        for event in events
        if event.get("stage") == "ResponseComplete"
        and event["level"] == "RequestResponse"  # the status writes; the operator's other calls are Metadata
        and event["user"]["username"] == OPERATOR
        and event.get("responseStatus", {}).get("code") == 200
    ]
    kinds = {event["objectRef"]["resource"] for event in writes}
    assert kinds == {"tritonmodels", "tritonservers"}, kinds
    pruned = {
        f"{event['objectRef']['resource']}/{event['objectRef']['name']}: {path}"
        for event in writes
        for path in _missing(event["requestObject"].get("status"), event["responseObject"].get("status"))
    }
    assert not pruned, sorted(pruned)


def test_deleting_the_examples_leaves_nothing_behind(installed: None) -> None:
    """The finalizer unloads each model before it goes; the server's children go by the real garbage
    collector (which first discovers the CRD's kind: some seconds); its pods within their grace period."""
    kubectl("apply", "-k", str(EXAMPLES))
    pods = _items("pods", "-l", "app.kubernetes.io/instance=triton")
    grace = max((p["spec"].get("terminationGracePeriodSeconds", 30) for p in pods), default=30)
    kubectl("delete", "-k", str(EXAMPLES), "--timeout=180s", timeout=200)
    assert _items("tritonmodels") == [] and _items("tritonservers") == []
    for kind in ("deployments", "replicasets", "services", "configmaps", "secrets"):
        gone = kubectl("wait", "--for=delete", kind, "-l", "app.kubernetes.io/instance=triton", "--timeout=120s",
                       check=False, timeout=150)  # fmt: skip
        assert gone.returncode == 0 or "no matching resources" in gone.stderr, (kind, gone.stderr)
    left = _items("deployments,services,configmaps,secrets", "-l", "app.kubernetes.io/managed-by=triton-operator")
    assert left == [], [f"{o['kind']}/{o['metadata']['name']}" for o in left]
    gone = kubectl("wait", "--for=delete", "pods", "-l", "app.kubernetes.io/instance=triton",
                   f"--timeout={grace + 60}s", check=False, timeout=grace + 90)  # fmt: skip
    assert gone.returncode == 0 or "no matching resources" in gone.stderr, gone.stderr


def test_rbac_refused_the_operator_nothing(installed: None) -> None:
    """Every request the operator made under the chart's ServiceAccount, as the API server's audit log
    has it: a rule the chart lacks shows as a 403 there (the operator would log it and carry on)."""
    log = current().audit_log
    if log is None:
        pytest.skip("NOT RUN: the audit log is the built control plane's")
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    calls = [e for e in events if e.get("stage") == "ResponseComplete" and e["user"]["username"] == OPERATOR]
    assert len({(e["verb"], e["objectRef"]["resource"]) for e in calls if "objectRef" in e}) > 10, calls[:3]
    refused = {
        f"{e['verb']} {e['objectRef'].get('resource')}/{e['objectRef'].get('subresource', '')} "
        f"in {e['objectRef'].get('namespace', '(cluster)')}"
        for e in calls
        if e.get("responseStatus", {}).get("code") == 403 and not _namespace_terminating(e)
    }
    assert not refused, sorted(refused)


def _namespace_terminating(event: dict[str, Any]) -> bool:
    """A 403 of the namespace's lifecycle, not of RBAC: a test's namespace being deleted takes no new
    objects, and the operator may still be writing there (an Event, a child) as it goes."""
    message = event.get("responseStatus", {}).get("message", "")
    return "because it is being terminated" in message and " cannot " not in message
