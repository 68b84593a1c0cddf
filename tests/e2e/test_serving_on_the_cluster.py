"""Serving through change on the real control plane, under the operator README installs: the clients
of tests/support/traffic.py send through the Service's ClusterIP (the proxy follows the real
EndpointSlice controller) while the server scales through its scale subresource (`kubectl scale`),
the real Deployment controller rolls every pod for a flag (each pod drained), a model edit reloads
in place, new files that cannot load are refused while the old revision serves on, the leading
operator's pod is deleted, and the API server is away for 30 s. Nothing a client sends may fail
(a kept HTTP connection loses at most its request in flight once per pod that leaves).
"""

from __future__ import annotations

import base64
import copy
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import yaml

from tests.support.e2e import E2E_MARKS, NEEDS_NODES, current, kubectl
from tests.support.models import add_code
from tests.support.resources import FILES, MODEL
from tests.support.serving import infer
from tests.support.traffic import (
    AGE_MS,
    STREAM,
    Client,
    clients,
    drained_server,
    failures,
    http_model,
    sent,
    ticker_model,
)
from triton_operator.api.types import parse_quantity
from triton_operator.protocol.names import GRPC_CONTROL_METADATA
from triton_operator.render.deployment import SHM_VOLUME

pytestmark = [*E2E_MARKS, NEEDS_NODES, pytest.mark.triton, pytest.mark.slow]
NAMESPACE = "serving-change"
MODELS = ("add", "add-http", "ticker")
SETTLE_SECONDS = 300  # pods scheduled and started, three python models loaded on each, on two busy cores
AWAY_SECONDS = 30
CANNOT_LOAD = add_code(initialize="raise RuntimeError('weights.bin is missing from the model folder')")


def _get(*args: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    return json.loads(kubectl("get", *args, "-n", namespace, "-o", "json").stdout)["items"]  # type: ignore[no-any-return]


def _until(what: str, done: Callable[[], Any], timeout: float = SETTLE_SECONDS, namespace: str = NAMESPACE) -> Any:
    """`done()`'s first truthy answer, read from the API server every half second; fails naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := done():
            return found
        time.sleep(0.5)  # a poll of the API server, bounded by `timeout`
    pytest.fail(f"not within {timeout:.0f} s: {what}\n{_seen(namespace)}")


def _seen(namespace: str) -> str:
    """What a failed wait saw: each pod's conditions and address, each model's replicas, the ready endpoints."""
    lines = []
    for o in _get("pods,tritonmodels,endpointslices", namespace=namespace):
        name = f"{o['kind']} {o['metadata']['name']}"
        if o["kind"] == "Pod":
            conditions = {c["type"]: c["status"] for c in o["status"].get("conditions", [])}
            terminating = " terminating" if o["metadata"].get("deletionTimestamp") else ""
            lines.append(f"{name} {o['status'].get('podIP')}{terminating} {conditions}")
        elif o["kind"] == "TritonModel":
            lines.append(f"{name} {o.get('status', {}).get('replicas')}")
        else:
            endpoints = [(e["addresses"], (e.get("conditions") or {}).get("ready")) for e in o.get("endpoints") or []]
            lines.append(f"{name} {endpoints}")
    return "\n".join(lines)


def _serving(replicas: int, namespace: str = NAMESPACE) -> list[dict[str, Any]] | None:
    """The server's pods when `replicas` of them serve: each Ready and not terminating, every model
    loaded on each, and the Service's ready endpoints exactly their addresses; else None."""
    seen = _get("pods,tritonmodels,endpointslices", namespace=namespace)
    pods = [o for o in seen if o["kind"] == "Pod" and o["metadata"]["labels"].get("app.kubernetes.io/instance")]
    ready = [
        pod
        for pod in pods
        if not pod["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
    ]
    models = {o["metadata"]["name"]: o.get("status", {}).get("replicas") for o in seen if o["kind"] == "TritonModel"}
    endpoints = {
        address
        for o in seen
        if o["kind"] == "EndpointSlice" and o["metadata"]["labels"].get("kubernetes.io/service-name") == "triton"
        for endpoint in o.get("endpoints") or []
        if (endpoint.get("conditions") or {}).get("ready")
        for address in endpoint["addresses"]
    }
    every_model = models == dict.fromkeys(MODELS, f"{replicas}/{replicas}")
    in_service = len(pods) == len(ready) == replicas and endpoints == {p["status"]["podIP"] for p in ready}
    return ready if every_model and in_service else None


def _names(pods: list[dict[str, Any]]) -> set[str]:
    return {pod["metadata"]["name"] for pod in pods}


def _model(name: str = "add") -> dict[str, Any]:
    return json.loads(kubectl("get", "tritonmodel", name, "-n", NAMESPACE, "-o", "json").stdout)  # type: ignore[no-any-return]


def _condition(model: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in model.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def _reloaded(before: str) -> dict[str, Any] | None:
    """The add model's status once a revision other than `before` is Ready on both pods."""
    model = _model()
    status = model.get("status", {})
    ready = _condition(model, "Ready").get("status") == "True"
    return status if ready and status.get("replicas") == "2/2" and status.get("configHash") != before else None


def _edit(delay_us: int) -> None:
    """A config edit to the add model: a reload in place on every pod."""
    before = _model()["status"]["configHash"]
    patch = {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": delay_us}}}}
    kubectl("patch", "tritonmodel", "add", "-n", NAMESPACE, "--type=merge", "-p", json.dumps(patch))
    _until("the edit ready on both pods", lambda: _reloaded(before))


def _apply(*objects: dict[str, Any], namespace: str = NAMESPACE) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all([copy.deepcopy(o) for o in objects]))


@contextmanager
def _served(namespace: str, server: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """`server`, the add model under two names and the ticker, served on two pods in a namespace of
    their own (deleted at the end); the Service's gRPC and HTTP addresses on its ClusterIP."""
    kubectl("create", "namespace", namespace)
    try:
        _apply(server, FILES, MODEL, http_model(), *ticker_model(), namespace=namespace)
        _until("two pods serving", lambda: _serving(2, namespace), namespace=namespace)
        address = json.loads(kubectl("get", "service", "triton", "-n", namespace, "-o", "json").stdout)["spec"][
            "clusterIP"
        ]
        yield f"{address}:8001", f"{address}:8000"
    finally:
        kubectl("delete", "namespace", namespace, "--timeout=300s", check=False, timeout=330)


@pytest.fixture(scope="module")
def addresses(operator_installed: None) -> Iterator[tuple[str, str]]:
    """The drained server and its models, served (_served)."""
    with _served(NAMESPACE, drained_server()) as served:
        yield served


def _all_answered(kinds: dict[str, list[Client]]) -> bool:
    """Every request client answered 20 times (streams take seconds each: counted at the end)."""
    return all(count > 20 for kind, count in sent(kinds).items() if kind != STREAM)


def _assert_none_failed(kinds: dict[str, list[Client]], pods_left: int) -> None:
    every = {kind: [f for client in group for f in client.failures] for kind, group in kinds.items()}
    assert every["grpc"] == [] and every[STREAM] == [] and every["http-new"] == [], every
    # A keep-alive connection is cut at a pod's exit timeout: at most its request in flight fails, once per pod.
    assert len(every["http-keep-alive"]) <= pods_left, every["http-keep-alive"]


def _shm_bytes(pod: dict[str, Any]) -> tuple[int, int | None]:
    """A pod's /dev/shm: the sizeLimit its spec gives, and the size of the tmpfs its tritonserver has
    there (from the process's mounts; None where no such process runs here)."""
    [limit] = [v["emptyDir"]["sizeLimit"] for v in pod["spec"]["volumes"] if v["name"] == SHM_VOLUME]
    name = pod["metadata"]["name"]
    for process in Path("/proc").iterdir():
        try:
            command = (process / "cmdline").read_bytes().split(b"\0")
            if not command[0].endswith(b"tritonserver") or not any(name.encode() in part for part in command):
                continue
            mounts = (process / "mounts").read_text().splitlines()
        except OSError:
            continue
        # The pod's own tmpfs is mounted over the host's /dev/shm: the last one listed is what it sees.
        options = [line.split()[3] for line in mounts if line.split()[1:3] == ["/dev/shm", "tmpfs"]][-1]
        [size] = [option.removeprefix("size=") for option in options.split(",") if option.startswith("size=")]
        return int(parse_quantity(limit)), int(size.removesuffix("k")) * 1024
    return int(parse_quantity(limit)), None


def test_a_pod_s_dev_shm_is_the_size_its_spec_gives(addresses: tuple[str, str]) -> None:
    if current().plane is None:
        pytest.skip("NOT RUN: the pods' processes are read on the node built here")
    sizes = [_shm_bytes(pod) for pod in _get("pods")]
    assert len(sizes) == 2 and all(limit == mounted for limit, mounted in sizes), sizes


def test_no_request_fails_through_scaling_a_rollout_a_reload_and_a_refused_load(
    addresses: tuple[str, str],
) -> None:
    steps: dict[str, dict[str, int]] = {}
    left = 0
    with clients(*addresses) as kinds:
        _until("every client answered", lambda: _all_answered(kinds), timeout=120)

        def step(name: str, counted: dict[str, int]) -> None:
            steps[name] = {kind: count - counted[kind] for kind, count in failures(kinds).items()}

        counted, before = failures(kinds), _names(_get("pods"))
        kubectl("scale", "tritonserver", "triton", "-n", NAMESPACE, "--replicas=4")  # the scale subresource
        assert _server()["spec"]["replicas"] == 4
        new = [pod for pod in _until("four pods serving", lambda: _serving(4)) if _names([pod]) - before]
        ready, key = time.monotonic(), _control_key()
        start = {pod["metadata"]["name"]: _grpc_requests(pod, key) for pod in new}
        # The kept gRPC channels reach the new pods as the server's max connection age recycles them.

        def grown() -> bool:
            return all(_grpc_requests(pod, key) > start[pod["metadata"]["name"]] for pod in new)

        _until("gRPC traffic on every new pod", grown, timeout=60)
        reached = time.monotonic() - ready
        step("scale 2->4", counted)

        counted, streamed = failures(kinds), sent(kinds)[STREAM]
        kubectl("scale", "tritonserver", "triton", "-n", NAMESPACE, "--replicas=2")
        _until("two pods serving", lambda: _serving(2))
        left += 2
        step("scale 4->2", counted)
        assert sent(kinds)[STREAM] > streamed, "no stream ended whole while two pods drained"

        counted, old = failures(kinds), _names(_get("pods"))
        patch = {"spec": {"modelLoadThreadCount": 2}}
        kubectl("patch", "tritonserver", "triton", "-n", NAMESPACE, "--type=merge", "-p", json.dumps(patch))
        rolled = _until("every pod replaced and serving", lambda: (s := _serving(2)) and not old & _names(s) and s)
        left += 2
        step("rollout", counted)
        deployment = json.loads(kubectl("get", "deployment", "triton", "-n", NAMESPACE, "-o", "json").stdout)
        assert deployment["status"].get("updatedReplicas") == 2, deployment["status"]

        counted = failures(kinds)
        _edit(300)
        assert _names(_get("pods")) == _names(rolled), "a config edit restarted a pod"
        step("reload", counted)

        counted = failures(kinds)
        kubectl("patch", "configmap", "add-files", "-n", NAMESPACE, "--type=merge",
                "-p", json.dumps({"data": {"model.py": CANNOT_LOAD.decode()}}))  # fmt: skip
        refused = _until(
            "the new files refused",
            lambda: (c := _condition(_model(), "Loaded")).get("reason") == "LoadFailed" and c,
        )
        assert "weights.bin is missing from the model folder" in refused["message"], refused
        model = _model()
        assert _condition(model, "Ready")["reason"] == "LoadFailed"
        assert {state["state"] for state in model["status"]["replicaStates"]} == {"READY"}, model["status"]
        grpc_address = addresses[0]
        assert infer(grpc_address) == [2.0] * 4  # the old revision answers, through the ClusterIP
        kubectl("patch", "configmap", "add-files", "-n", NAMESPACE, "--type=merge",
                "-p", json.dumps({"data": {"model.py": add_code(offset=1.0).decode()}}))  # fmt: skip
        _until("the fixed files loaded", lambda: _condition(_model(), "Loaded").get("reason") == "Loaded")
        _until("the fixed files answering", lambda: infer(grpc_address) == [3.0] * 4, timeout=60)
        step("refused load", counted)
        total = sent(kinds)
    print(f"sent {total}; failures per step {steps}; the kept gRPC channels reached both new pods {reached:.1f} s "
          "after they served")  # fmt: skip
    _assert_none_failed(kinds, left)
    # Each recycle (a connection age and its grace) re-picks a pod among four through the proxy's turns:
    # a coin flip per recycle; the bound leaves a flake chance under 1 in 1,000.
    assert reached <= 6 * (AGE_MS * 1.1 / 1000 + 1) + 5, reached


def _leader() -> tuple[str, str]:
    """The operator's Lease and its holder (the leading pod's identity)."""
    leases = json.loads(kubectl("get", "leases", "-n", "triton-system", "-o", "json").stdout)["items"]
    [lease] = [lease for lease in leases if lease["metadata"]["name"].startswith("triton-operator")]
    return lease["metadata"]["name"], lease["spec"].get("holderIdentity") or ""


def test_the_standby_operator_takes_over_from_a_deleted_leader_with_nothing_lost(
    addresses: tuple[str, str],
) -> None:
    """The leading pod deleted (as a node drain or an upgrade does): the standby takes the Lease, the
    Deployment starts a new standby, and an edit made after is reconciled; no request fails."""
    lease, holder = _until("a leader", lambda: (found := _leader())[1] and found)
    pods = json.loads(kubectl("get", "pods", "-n", "triton-system", "-o", "json").stdout)["items"]
    [leading] = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] in holder]
    with clients(*addresses) as kinds:
        _until("every client answered", lambda: _all_answered(kinds), timeout=120)
        deleted = time.monotonic()
        kubectl("delete", "pod", leading, "-n", "triton-system", "--wait=false")
        _until("the standby holding the Lease", lambda: _leader()[1] not in ("", holder), timeout=120)
        took_over = time.monotonic() - deleted
        _edit(400)
        reconciled = time.monotonic() - deleted
    print(f"Lease {lease}: taken over {took_over:.1f} s after the leader's pod was deleted; an edit made then "
          f"ready on both pods {reconciled:.1f} s after; sent {sent(kinds)}")  # fmt: skip
    _assert_none_failed(kinds, 0)


def _grpc_requests(pod: dict[str, Any], key: str) -> int:
    """Triton's own count of the `add` requests a pod answered (the kept gRPC channels send those)."""
    client = grpcclient.InferenceServerClient(f"{pod['status']['podIP']}:8001")
    try:
        stats = client.get_inference_statistics("add", headers={GRPC_CONTROL_METADATA: key}, as_json=True)
    finally:
        client.close()
    return sum(int(s["inference_stats"]["success"].get("count", 0)) for s in stats.get("model_stats", []))


def _control_key() -> str:
    secret = json.loads(kubectl("get", "secret", "triton-control", "-n", NAMESPACE, "-o", "json").stdout)
    return base64.b64decode(secret["data"]["control-key"]).decode()


def _ready_on_pods(name: str) -> list[bool]:
    """Whether each pod's Triton holds `name` READY (its repository index, asked with the control key)."""
    key = _control_key()
    ready = []
    for pod in _get("pods"):
        client = grpcclient.InferenceServerClient(f"{pod['status']['podIP']}:8001")
        try:
            index = client.get_model_repository_index(headers={GRPC_CONTROL_METADATA: key}, as_json=True)
        finally:
            client.close()
        ready.append(any(m["name"] == name and m.get("state") == "READY" for m in index.get("models", [])))
    return ready


def test_the_api_server_away_for_30_s_takes_nothing_out_of_service(addresses: tuple[str, str]) -> None:
    """Pods, the Service and the operator ride out an API server that is gone, then reconcile again."""
    plane = current().plane
    if plane is None:
        pytest.skip("NOT RUN: stopping the API server is done only to the control plane built here")
    with clients(*addresses) as kinds:
        _until("every client answered", lambda: _all_answered(kinds), timeout=120)
        with plane.api_server_away():
            time.sleep(AWAY_SECONDS)  # what is measured: the outage's length
        answered_away = sent(kinds)
        _edit(500)
    print(f"the API server away {AWAY_SECONDS} s; sent {answered_away} by its return")
    _assert_none_failed(kinds, 0)
    _until("both pods serving every model after", lambda: _serving(2), timeout=60)
    # A model deleted after: unloaded from every pod before its finalizer lets it go.
    kubectl("delete", "tritonmodel", "add-http", "-n", NAMESPACE, "--timeout=120s", timeout=150)
    assert _ready_on_pods("add_http") == [False, False]


def test_a_configmap_made_by_someone_else_is_never_taken_over(addresses: tuple[str, str]) -> None:
    """A model's config ConfigMap name already held by one `kubectl create` made (another field
    manager, no owner): the server says NameTaken, the ConfigMap stays as its maker wrote it, and the
    server's other models serve on."""
    kubectl("create", "configmap", "taken-config", "-n", NAMESPACE, "--from-literal=note=not the operator's")
    made = json.loads(kubectl("get", "configmap", "taken-config", "-n", NAMESPACE, "-o", "json").stdout)
    taken = copy.deepcopy(MODEL)
    taken["metadata"]["name"] = "taken"
    taken["spec"]["modelName"] = "taken"
    _apply(taken)
    try:
        owned = _until(
            "NameTaken on the server",
            lambda: (c := _condition(_server(), "ChildrenOwned")).get("reason") == "NameTaken" and c,
            timeout=120,
        )
        assert owned["status"] == "False" and "ConfigMap taken-config" in owned["message"], owned
        after = json.loads(kubectl("get", "configmap", "taken-config", "-n", NAMESPACE, "-o", "json").stdout)
        assert after["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]  # never written
        assert after["data"] == {"note": "not the operator's"} and not after["metadata"].get("ownerReferences")
        assert _condition(_model(), "Ready").get("status") == "True"
    finally:
        kubectl("delete", "tritonmodel", "taken", "-n", NAMESPACE, "--timeout=120s", check=False, timeout=150)
        kubectl("delete", "configmap", "taken-config", "-n", NAMESPACE, check=False)


def _server() -> dict[str, Any]:
    return json.loads(kubectl("get", "tritonserver", "triton", "-n", NAMESPACE, "-o", "json").stdout)  # type: ignore[no-any-return]


def test_without_a_pre_stop_delay_a_scale_down_fails_requests(operator_installed: None) -> None:
    """The measurement sees what the drain prevents: with no preStop delay, Triton fails every gRPC
    request from SIGTERM on and refuses new HTTP connections while the Service still sends to the pod."""
    with _served("no-pre-stop", drained_server(pre_stop_seconds=0)) as served, clients(*served) as kinds:
        _until("every client answered", lambda: _all_answered(kinds), timeout=120, namespace="no-pre-stop")
        kubectl("scale", "tritonserver", "triton", "-n", "no-pre-stop", "--replicas=1")
        _until("one pod serving", lambda: _serving(1, "no-pre-stop"), namespace="no-pre-stop")
    counted = failures(kinds)
    print(f"failures with no preStop delay: {counted}")
    # Which kind of client meets the cut depends on when its requests fall (a CI run saw one keep-alive
    # HTTP request fail and none of the others): any failure is what the drain prevents.
    assert sum(counted.values()) > 0, counted
