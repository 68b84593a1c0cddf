"""The operator's pure status code, table by table: what each pod, model and server condition says
for what a pass saw, with a fixed clock (no Kubernetes, no Triton)."""

from __future__ import annotations

from typing import Any

import pytest

from triton_operator.api.findings import Finding
from triton_operator.api.parse import parse_resource
from triton_operator.api.status_fields import RolloutStatus
from triton_operator.decide.readiness_gate import PodStanding, pod_condition
from triton_operator.decide.seen import ParsedModel, Pass, Pod, ServerOutcome
from triton_operator.decide.status_content import ModelOutcome, model_status, server_status
from triton_operator.k8s.api import merge_patch_between
from triton_operator.k8s.watch.indexes import pod_view
from triton_operator.render.fleet import RenderedServer, plan_fleet
from triton_operator.triton.client import ModelState
from triton_operator.triton.sync import ReplicaReport

KEY = ("ml", "triton")
CONFIG = {
    "backend": "python",
    "maxBatchSize": 4,
    "input": [{"name": "X", "dataType": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "Y", "dataType": "TYPE_FP32", "dims": [4]}],
}
SERVER = {
    "apiVersion": "triton-operator.io/v1alpha1",
    "kind": "TritonServer",
    "metadata": {"name": "triton", "namespace": "ml", "uid": "s1", "generation": 3},
    "spec": {"replicas": 2, "modelRepository": {"pvc": {"claimName": "models"}}},
}
MODEL = {
    "apiVersion": "triton-operator.io/v1alpha1",
    "kind": "TritonModel",
    "metadata": {"name": "add", "namespace": "ml", "uid": "m1", "generation": 7},
    "spec": {"serverRef": {"name": "triton"}, "config": CONFIG},
}
INVALID = {
    **MODEL,
    "spec": {"serverRef": {"name": "triton"}, "config": {**CONFIG, "maxBatchSizes": 4}},
}  # an unknown field
T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"
POD_A = Pod("triton-a", "pa", "10.0.0.1:8001", deleting=False, models_ready=None, fingerprint="")
POD_B = Pod("triton-b", "pb", "10.0.0.2:8001", deleting=False, models_ready=None, fingerprint="")


def rendered_server() -> RenderedServer:
    server, _ = parse_resource(SERVER)
    model, _ = parse_resource(MODEL)
    [rendered] = plan_fleet([server], [model]).servers  # type: ignore[list-item]
    return rendered


RENDERED = rendered_server()
REVISION = RENDERED.models[0].revision
DESIRED = {"add": RENDERED.models[0].desired}


def report(state: ModelState | None = None, failed: str = "", error: str = "", probe_failed: str = "") -> ReplicaReport:
    probes = {"add": probe_failed} if probe_failed else {}
    return ReplicaReport(
        "x",
        states={"add": state} if state else {},
        failed={"add": failed} if failed else {},
        error=error,
        probe_failed=probes,
    )


READY_NOW = ModelState("add", ready=True, revision=REVISION, version="1")
READY_OLD = ModelState("add", ready=True, revision="0ld", version="1")


NEW_POD = PodStanding()
NEW_POD_BESIDE_ONE_SERVING = PodStanding(ready_elsewhere=frozenset({"add"}))
IN_SERVICE = PodStanding(in_service=True, served=frozenset())
IN_SERVICE_SERVING = PodStanding(in_service=True, served=frozenset({"add"}))
NOT_COUNTED = "0 models ready; not ready here, the models' own failure or load (see their status): add"
PROBE_FAILED = "it loaded, but its first probe request failed: 'broken'"


@pytest.mark.parametrize(
    ("pod_report", "standing", "status", "reason", "message"),
    [
        (report(READY_NOW), NEW_POD, "True", "Loaded", "1 models ready"),
        (report(), NEW_POD, "False", "Loading", "not ready yet: add"),
        (report(ModelState("add", ready=False)), NEW_POD, "False", "Loading", "not ready yet: add"),
        # a model that serves nowhere and failed here is its own failure: the new pod enters
        (report(failed="load failed: no space"), NEW_POD, "True", "Loaded", NOT_COUNTED),
        # one that serves on another pod: this pod would fail what the others serve
        (
            report(failed="load failed: no space"),
            NEW_POD_BESIDE_ONE_SERVING,
            "False",
            "LoadFailed",
            "add: load failed: no space",
        ),
        # in service: a model new to the pod loading or failing never takes the pod out
        (report(), IN_SERVICE, "True", "Loaded", NOT_COUNTED),
        (report(failed="initialize() raised"), IN_SERVICE, "True", "Loaded", NOT_COUNTED),
        # in service: a model it served is gone (Triton restarted): out until it is back
        (report(), IN_SERVICE_SERVING, "False", "Loading", "not ready yet: add"),
        (
            report(failed="load failed: no space"),
            IN_SERVICE_SERVING,
            "False",
            "LoadFailed",
            "add: load failed: no space",
        ),
        # in service but nothing seen since the operator started: judged as a pod entering service
        (report(), PodStanding(in_service=True), "False", "Loading", "not ready yet: add"),
        (report(failed="initialize() raised"), PodStanding(in_service=True), "True", "Loaded", NOT_COUNTED),
        # loaded, but its first probe failed: a failed load, whatever Triton's readiness says
        (report(READY_NOW, probe_failed=PROBE_FAILED), NEW_POD, "True", "Loaded", NOT_COUNTED),
        (
            report(READY_NOW, probe_failed=PROBE_FAILED),
            NEW_POD_BESIDE_ONE_SERVING,
            "False",
            "LoadFailed",
            f"add: {PROBE_FAILED}",
        ),
        (report(READY_NOW, probe_failed=PROBE_FAILED), IN_SERVICE, "True", "Loaded", NOT_COUNTED),
    ],
    ids=[
        "ready",
        "absent",
        "not-ready",
        "new-pod-bad-new-model",
        "new-pod-model-failing-here-only",
        "in-service-new-model-loading",
        "in-service-bad-new-model",
        "in-service-served-model-gone",
        "in-service-served-model-failed",
        "after-restart-loading",
        "after-restart-bad-new-model",
        "new-pod-probe-failed",
        "new-pod-probe-failed-here-only",
        "in-service-probe-failed",
    ],
)
def test_pod_condition(
    pod_report: ReplicaReport, standing: PodStanding, status: str, reason: str, message: str
) -> None:
    condition = pod_condition(DESIRED, pod_report, standing, clock=lambda: T0)
    assert condition == {
        "type": "triton-operator.io/models-ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": T0,
    }


def test_a_pod_that_does_not_answer_gets_no_condition() -> None:
    """Fail static: what the operator cannot see (a timeout, a refused key) leaves the gate as it is."""
    assert pod_condition(DESIRED, report(error="deadline exceeded")) is None
    assert pod_condition(DESIRED, report(error="PERMISSION_DENIED: the key is refused")) is None


def pod(name: str = "triton-a", **status: Any) -> dict[str, Any]:
    spec = {"containers": [{"name": "tritonserver", "ports": [{"name": "grpc", "containerPort": 8001}]}]}
    return {"metadata": {"name": name, "uid": "u"}, "spec": spec, "status": status}


@pytest.mark.parametrize(
    ("body", "address", "models_ready"),
    [
        (pod(phase="Running", podIP="10.0.0.1"), "10.0.0.1:8001", None),
        (pod(phase="Pending", podIP="10.0.0.1"), None, None),
        (pod(phase="Running"), None, None),
        (
            pod(
                phase="Running",
                podIP="10.0.0.1",
                conditions=[{"type": "triton-operator.io/models-ready", "status": "True"}],
            ),
            "10.0.0.1:8001",
            "True",
        ),
        (
            {
                **pod(phase="Running", podIP="10.0.0.1"),
                "spec": {"containers": [{"name": "sidecar", "ports": [{"name": "grpc", "containerPort": 9}]}]},
            },
            None,
            None,
        ),
    ],
    ids=["running", "pending", "no-ip", "gate-set", "no-triton-container"],
)
def test_pod_view(body: dict[str, Any], address: str | None, models_ready: str | None) -> None:
    view = pod_view(body)
    assert (view.name, view.address, view.models_ready, view.deleting) == ("triton-a", address, models_ready, False)


def test_pod_view_fingerprint_changes_with_address_restarts_and_deletion_only() -> None:
    base = pod(phase="Running", podIP="10.0.0.1")
    same = pod(phase="Running", podIP="10.0.0.1", conditions=[{"type": "Ready", "status": "True"}])
    moved = pod(phase="Running", podIP="10.0.0.9")
    restarted = pod(phase="Running", podIP="10.0.0.1", containerStatuses=[{"name": "tritonserver", "restartCount": 1}])
    deleting = {**base, "metadata": {**base["metadata"], "deletionTimestamp": T0}}
    fingerprints = [pod_view(body).fingerprint for body in (base, same, moved, restarted, deleting)]
    assert fingerprints[0] == fingerprints[1] and len(set(fingerprints)) == 4
    assert pod_view(deleting).deleting


SEEN_BOTH = {POD_A.name: report(READY_NOW), POD_B.name: report(READY_NOW)}


@pytest.mark.parametrize(
    ("body", "outcome", "reports", "pods", "waiting", "state", "loaded", "replicas"),
    [
        (MODEL, ServerOutcome(), SEEN_BOTH, [POD_A, POD_B], [], "Ready", ("True", "Loaded"), "2/2"),
        (
            MODEL,
            ServerOutcome(),
            {POD_A.name: report(READY_NOW), POD_B.name: report(READY_OLD)},
            [POD_A, POD_B],
            [],
            "Loading",
            ("False", "Loading"),
            "1/2",
        ),
        (
            MODEL,
            ServerOutcome(),
            {POD_A.name: report(READY_NOW)},
            [POD_A, POD_B],
            [],
            "Loading",
            ("False", "Loading"),
            "1/2",
        ),
        (
            MODEL,
            ServerOutcome(),
            {POD_A.name: report(READY_OLD, failed="bad"), POD_B.name: report(READY_NOW)},
            [POD_A, POD_B],
            [],
            "Failed",
            ("False", "LoadFailed"),
            "1/2",
        ),
        (
            MODEL,
            ServerOutcome(),
            {POD_A.name: report(error="timeout"), POD_B.name: report(READY_NOW)},
            [POD_A, POD_B],
            [],
            "Loading",
            ("False", "PodUnreachable"),
            "1/2",
        ),
        (
            MODEL,
            ServerOutcome(),
            {POD_A.name: report(READY_NOW)},
            [POD_A, POD_B],
            [POD_B.name],
            "Loading",
            ("False", "Loading"),
            "1/2",
        ),
        (MODEL, ServerOutcome(), {}, [], [], "Loading", ("False", "NoPods"), "0/0"),
        (MODEL, ServerOutcome(missing=True), {}, [], [], "Loading", ("False", "ServerNotFound"), None),
        (
            MODEL,
            ServerOutcome(findings=[Finding("error", "spec.image", "bad", "TritonServer/ml/triton")]),
            {},
            [],
            [],
            "Loading",
            ("False", "ServerInvalid"),
            None,
        ),
        (INVALID, ServerOutcome(), SEEN_BOTH, [POD_A, POD_B], [], "Invalid", ("False", "InvalidSpec"), None),
        (
            MODEL,
            ServerOutcome(),
            {POD_A.name: report(READY_NOW, probe_failed=PROBE_FAILED), POD_B.name: report(READY_NOW)},
            [POD_A, POD_B],
            [],
            "Failed",
            ("False", "ProbeFailed"),
            "1/2",
        ),
        (
            MODEL,
            ServerOutcome(),
            {POD_A.name: report(READY_NOW, probe_failed=PROBE_FAILED), POD_B.name: report(READY_OLD, failed="bad")},
            [POD_A, POD_B],
            [],
            "Failed",
            ("False", "LoadFailed"),
            "0/2",
        ),
        # a probe failure reported where Triton's state of the model was not read
        (
            MODEL,
            ServerOutcome(),
            {POD_A.name: report(probe_failed=PROBE_FAILED), POD_B.name: report(READY_NOW)},
            [POD_A, POD_B],
            [],
            "Failed",
            ("False", "ProbeFailed"),
            "1/2",
        ),
    ],
    ids=[
        "ready",
        "old-revision-on-one",
        "pod-not-synced",
        "refused-on-one",
        "unreachable",
        "still-syncing",
        "no-pods",
        "no-server",
        "server-invalid",
        "invalid",
        "probe-failed-on-one",
        "probe-failed-and-refused",
        "probe-failed-no-state",
    ],
)
def test_model_outcome(
    body: dict[str, Any],
    outcome: ServerOutcome,
    reports: dict[str, ReplicaReport],
    pods: list[Pod],
    waiting: list[str],
    state: str,
    loaded: tuple[str, str],
    replicas: str | None,
) -> None:
    result = ModelOutcome.of(
        ParsedModel.of(body),
        KEY,
        RENDERED if body is MODEL else None,
        Pass(reports=reports, pods=pods, waiting=waiting),
        outcome,
    )
    conditions = {c.type: (c.status, c.reason) for c in result.conditions}
    assert (result.state, conditions["Loaded"], result.replicas) == (state, loaded, replicas)
    assert conditions["Ready"] == (
        ("True", "Ready") if state == "Ready" else ("False", loaded[1] if body is MODEL else "InvalidSpec")
    )


@pytest.mark.parametrize(
    ("reports", "waiting", "ready_pods", "state", "loaded", "replicas"),
    [
        ({POD_A.name: report(READY_NOW)}, [], [POD_A.name], "Ready", ("True", "Loaded"), "1/1"),
        ({POD_A.name: report(READY_NOW)}, [POD_B.name], [POD_A.name], "Ready", ("True", "Loaded"), "1/1"),
        (SEEN_BOTH, [], [POD_A.name], "Ready", ("True", "Loaded"), "1/1"),
        (SEEN_BOTH, [], [POD_A.name, POD_B.name], "Ready", ("True", "Loaded"), "2/2"),
        (
            {POD_A.name: report(READY_NOW), POD_B.name: report(failed="out of memory")},
            [],
            [POD_A.name],
            "Failed",
            ("False", "LoadFailed"),
            "1/2",
        ),
        (
            {POD_A.name: report(READY_NOW), POD_B.name: report(READY_NOW, probe_failed=PROBE_FAILED)},
            [],
            [POD_A.name],
            "Failed",
            ("False", "ProbeFailed"),
            "1/2",
        ),
        ({POD_A.name: report(READY_NOW)}, [], [], "Loading", ("False", "Loading"), "1/2"),
    ],
    ids=[
        "no-address-yet",
        "loading",
        "loaded-gate-not-yet-set",
        "joined",
        "load-failed-there",
        "probe-failed-there",
        "a-new-server-counts-every-pod",
    ],
)
def test_a_pod_joining_a_serving_server_enters_its_models_statuses_once_it_joined_or_failed(
    reports: dict[str, ReplicaReport],
    waiting: list[str],
    ready_pods: list[str],
    state: str,
    loaded: tuple[str, str],
    replicas: str,
) -> None:
    """Pod a serves (its gate True); pod b, added by a scale-up, is joining unless named in ready_pods."""
    seen = Pass(reports=reports, pods=[POD_A, POD_B], waiting=waiting, ready_pods=ready_pods)
    result = ModelOutcome.of(ParsedModel.of(MODEL), KEY, RENDERED, seen, ServerOutcome())
    conditions = {c.type: (c.status, c.reason) for c in result.conditions}
    assert (result.state, conditions["Loaded"], result.replicas) == (state, loaded, replicas)


def test_model_outcome_names_the_missing_server_and_carries_tritons_words() -> None:
    missing = ModelOutcome.of(ParsedModel.of(MODEL), KEY, None, Pass(), ServerOutcome(missing=True))
    assert missing.conditions[1].message == "no TritonServer 'triton' in namespace 'ml' yet; the model waits for it"
    refused = ModelOutcome.of(
        ParsedModel.of(MODEL),
        KEY,
        RENDERED,
        Pass(reports={POD_A.name: report(failed="out of memory")}, pods=[POD_A]),
        ServerOutcome(),
    )
    assert refused.conditions[1].message == "pod triton-a: out of memory"
    assert refused.replica_states[0].state == "UNAVAILABLE" and refused.replica_states[0].reason == "out of memory"


def test_a_terminating_pod_does_not_count_against_a_models_readiness() -> None:
    """A rolled-away pod drains out of its Service for its preStop (136 s by default): the model is as
    ready as the pods that stay, and the draining pod is not one of its replicas."""
    draining = Pod("triton-old", "po", "10.0.0.3:8001", deleting=True, models_ready="True", fingerprint="")
    ready = ModelOutcome.of(
        ParsedModel.of(MODEL), KEY, RENDERED, Pass(reports=SEEN_BOTH, pods=[POD_A, POD_B, draining]), ServerOutcome()
    )
    assert (ready.state, ready.replicas, [s.pod for s in ready.replica_states]) == (
        "Ready",
        "2/2",
        ["triton-a", "triton-b"],
    )


def test_model_status_keeps_transition_times_while_a_condition_holds() -> None:
    ready = ModelOutcome.of(
        ParsedModel.of(MODEL), KEY, RENDERED, Pass(reports=SEEN_BOTH, pods=[POD_A, POD_B]), ServerOutcome()
    )
    first = model_status(MODEL, ready, "triton", clock=lambda: T0)
    again = model_status({**MODEL, "status": first}, ready, "triton", clock=lambda: T1)
    assert again == first and {c["lastTransitionTime"] for c in first["conditions"]} == {T0}
    loading = ModelOutcome.of(
        ParsedModel.of(MODEL),
        KEY,
        RENDERED,
        Pass(reports={POD_A.name: report(READY_NOW)}, pods=[POD_A, POD_B]),
        ServerOutcome(),
    )
    moved = {
        c["type"]: c["lastTransitionTime"]
        for c in model_status({**MODEL, "status": first}, loading, "triton", clock=lambda: T1)["conditions"]
    }
    assert moved == {"ConfigValid": T0, "Loaded": T1, "Ready": T1}
    assert (
        first["modelName"] == "add"
        and first["configHash"] == REVISION
        and first["observedGeneration"] == 7
        and first["replicas"] == "2/2"
    )


HELD = (
    "not enough traffic to judge revision b: 5 requests, 0 failed on pod triton-a after 660s, 20 needed; holding: ..."
)


@pytest.mark.parametrize(
    ("record", "healthy"),
    [
        (RolloutStatus(phase="Stable", revision="a", stable_revision="a"), ("True", "Stable")),
        (RolloutStatus(phase="Stable", revision="b", stable_revision="b", previous_revision="a"), ("True", "Promoted")),
        (RolloutStatus(phase="Progressing", revision="b", stable_revision="a"), ("Unknown", "Progressing")),
        (RolloutStatus(phase="Baking", revision="b", stable_revision="a"), ("Unknown", "Baking")),
        (
            RolloutStatus(phase="Baking", revision="b", stable_revision="a", holding=True, message=HELD),
            ("Unknown", "NotEnoughTraffic"),
        ),
        (
            RolloutStatus(phase="Baking", revision="b", stable_revision="a", message=HELD),
            ("Unknown", "Baking"),
        ),  # the state is the field, not the words
        (RolloutStatus(phase="RolledBack", revision="b", stable_revision="a"), ("False", "RolledBack")),
    ],
    ids=["stable", "promoted", "progressing", "baking", "holding", "held-words-only", "rolled-back"],
)
def test_rollout_healthy(record: RolloutStatus, healthy: tuple[str, str]) -> None:
    ready = ModelOutcome.of(
        ParsedModel.of(MODEL), KEY, RENDERED, Pass(reports=SEEN_BOTH, pods=[POD_A, POD_B]), ServerOutcome()
    )
    conditions = model_status(MODEL, ready, "triton", rollout_record=record, clock=lambda: T0)["conditions"]
    assert next((c["status"], c["reason"]) for c in conditions if c["type"] == "RolloutHealthy") == healthy


@pytest.mark.parametrize(
    ("seen", "outcome", "ready", "models_ready", "managed"),
    [
        (
            Pass(pods=[POD_A, POD_B], ready_pods=["triton-a", "triton-b"], desired=DESIRED, synced=True),
            ServerOutcome(),
            ("True", "Ready"),
            ("True", "AllPodsReady"),
            ["add"],
        ),
        (
            Pass(pods=[POD_A, POD_B], ready_pods=["triton-a"], desired=DESIRED, synced=True),
            ServerOutcome(),
            ("False", "PodsNotReady"),
            ("False", "PodsNotReady"),
            ["add"],
        ),
        (
            Pass(pods=[POD_A], ready_pods=["triton-a"], desired=DESIRED, synced=True),
            ServerOutcome(),
            ("False", "PodsNotReady"),
            ("False", "PodsNotReady"),
            ["add"],
        ),
        (
            Pass(
                pods=[POD_A, POD_B],
                ready_pods=["triton-a", "triton-b"],
                desired=DESIRED,
                synced=True,
                reports={"triton-a": ReplicaReport("x", managed={"add", "was-loaded"}, error="timeout")},
            ),
            ServerOutcome(),
            ("False", "PodUnreachable"),
            ("False", "PodUnreachable"),
            ["add", "was-loaded"],
        ),
        (
            Pass(
                pods=[POD_A, POD_B],
                ready_pods=["triton-a", "triton-b"],
                desired=DESIRED,
                synced=True,
                waiting=["triton-b"],
            ),
            ServerOutcome(),
            ("False", "PodUnreachable"),
            ("False", "PodUnreachable"),
            ["add", "was-loaded"],
        ),
        (Pass(), ServerOutcome(), ("False", "NoPods"), ("False", "NoPods"), ["was-loaded"]),
        (
            Pass(),
            ServerOutcome(findings=[Finding("error", "spec.image", "bad", "TritonServer/ml/triton")]),
            ("False", "InvalidSpec"),
            ("False", "NoPods"),
            ["was-loaded"],
        ),
    ],
    ids=[
        "all-ready",
        "one-pod-missing-a-model",
        "fewer-pods-than-replicas",
        "in-service-but-unreachable",
        "in-service-still-syncing",
        "not-synced-keeps-managed",
        "invalid",
    ],
)
def test_server_status(
    seen: Pass, outcome: ServerOutcome, ready: tuple[str, str], models_ready: tuple[str, str], managed: list[str]
) -> None:
    body = {**SERVER, "status": {"managedModels": ["was-loaded"]}}
    status = server_status(body, RENDERED, seen, outcome, None, clock=lambda: T0)
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert (conditions["Ready"], conditions["ModelsReady"], status["managedModels"]) == (ready, models_ready, managed)
    assert (
        status["readyReplicas"] == len(seen.ready_pods)
        and status["replicas"] == 2
        and status["observedGeneration"] == 3
    )
    assert (
        status["selector"] == "app.kubernetes.io/instance=triton,app.kubernetes.io/managed-by=triton-operator,"
        "app.kubernetes.io/name=tritonserver"
    )
    assert {c["lastTransitionTime"] for c in status["conditions"]} == {T0}


@pytest.mark.parametrize(
    ("old", "new", "patch"),
    [
        ({"a": 1, "b": {"c": 2, "d": 3}}, {"a": 1, "b": {"c": 2, "d": 4}}, {"b": {"d": 4}}),
        ({"a": 1, "gone": 2}, {"a": 1}, {"gone": None}),
        ({"conditions": [1]}, {"conditions": [1, 2]}, {"conditions": [1, 2]}),
        ({}, {"placement": {"server": "a"}}, {"placement": {"server": "a"}}),
    ],
)
def test_a_status_patch_holds_only_what_changed(
    old: dict[str, Any], new: dict[str, Any], patch: dict[str, Any]
) -> None:
    """So a worker's write never puts back what the placement wrote meanwhile (it was unchanged in its view)."""
    assert merge_patch_between(old, new) == patch


def test_the_server_status_names_a_joining_pod_that_does_not_answer() -> None:
    """Its models' statuses leave a joining pod out until it joins: the server's says why it does not."""
    seen = Pass(
        reports={POD_A.name: report(READY_NOW), POD_B.name: report(error="connection refused")},
        pods=[POD_A, POD_B],
        ready_pods=[POD_A.name],
        synced=True,
    )
    status = server_status(SERVER, RENDERED, seen, ServerOutcome(), None, clock=lambda: T0)
    [models_ready] = [c for c in status["conditions"] if c["type"] == "ModelsReady"]
    assert models_ready["message"] == ("pods without every model: triton-b; not answering the control API: triton-b")


@pytest.mark.parametrize(
    ("outcome", "owned"),
    [
        (ServerOutcome(), ("True", "Owned", "")),
        (
            ServerOutcome(refused=["Deployment/triton: the API server refused it: 422: requests must be <= limits"]),
            ("False", "WriteRefused", "Deployment/triton: the API server refused it: 422: requests must be <= limits"),
        ),
        (
            ServerOutcome(taken=["Service triton is another object's"], refused=["Deployment/triton: refused"]),
            ("False", "NameTaken", "Service triton is another object's"),
        ),
    ],
    ids=["written", "refused", "taken-first"],
)
def test_a_child_the_api_server_refused_is_said_on_the_server(
    outcome: ServerOutcome, owned: tuple[str, str, str]
) -> None:
    """A write refused as it stands (invalid, forbidden) is a fault to fix, said with the API server's words:
    the Deployment a scale or an edit should change would otherwise stay as it was, with nothing said."""
    seen = Pass(pods=[POD_A, POD_B], ready_pods=["triton-a", "triton-b"], desired=DESIRED, synced=True)
    status = server_status(SERVER, RENDERED, seen, outcome, None, clock=lambda: T0)
    conditions = {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}
    assert conditions["ChildrenOwned"] == owned
    assert conditions["Ready"][:2] == (("True", "Ready") if owned[0] == "True" else ("False", owned[1]))
