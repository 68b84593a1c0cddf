"""The chaos suite, pods and status writes: faults the operator must ride out by itself, each with its
bound, on the emulated API server with real tritonservers as pods (faults from tests/support/faults.py).

- A hung pod (SIGSTOP: it accepts connections and never answers) delays only itself: the healthy
  pod's edit and the model's status come at most one read timeout later than without it, the hung
  pod keeps its gate and reads UNREACHABLE in the model's status, and a model deleted meanwhile is
  released at its finalizer bound.
- An operator stopped mid-load and started again waits for the load Triton still runs: no model is
  loaded twice.
- A pod whose Triton refuses the operator's key keeps its gate: only Triton's own word takes a pod
  out of service.
- A status write, or a pod's readiness condition, the API server refuses is written again within a
  few seconds, not at the resync.
"""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

import pytest
import tritonclient.grpc as grpcclient

from tests.support.faults import ApiFault, hang, resume
from tests.support.models import add_code
from tests.support.operator import OPERATOR_TOKEN, Cluster, Pods, api_server, running_operator
from tests.support.resources import FILES, MODEL, SERVER
from tests.support.serving import add_pod, serve_add_model
from triton_operator.k8s.process import metrics
from triton_operator.local.tritonserver import LocalTriton

READ_TIMEOUT = 1.0
SLACK = 2.0  # what a busy two-core machine may add to a bound
RETRY_BOUND = (
    8.0  # a refused write waits the worker's backoff (1 s, doubling while passes do not settle), far below the resync
)


def model_status(cluster: Cluster) -> dict[str, Any]:
    return (cluster.get("TritonModel", "add") or {}).get("status") or {}


def pod_revision(cluster: Cluster, pod: str) -> str | None:
    return next((s.get("revision") for s in model_status(cluster).get("replicaStates", []) if s["pod"] == pod), None)


def replica_state(cluster: Cluster, pod: str) -> str | None:
    return next((s["state"] for s in model_status(cluster).get("replicaStates", []) if s["pod"] == pod), None)


def gate(cluster: Cluster, pod: str) -> str | None:
    return (cluster.pod_condition(pod) or {}).get("status")


async def edit(cluster: Cluster, delay_us: int) -> tuple[float, int]:
    """A config edit; how long until its generation is in the model's status with pod triton-a at the new revision."""
    generation = cluster.get("TritonModel", "add")["metadata"]["generation"]
    started = time.monotonic()
    await cluster.patch(
        "TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": delay_us}}}}
    )

    def seen() -> bool:
        status = model_status(cluster)
        return status.get("observedGeneration", 0) > generation and pod_revision(cluster, "triton-a") == status.get(
            "configHash"
        )

    await cluster.wait("the edit on triton-a and in the status", seen, timeout=60)
    return time.monotonic() - started, generation + 1


@pytest.mark.triton
async def test_a_hung_pod_delays_only_itself(pods: Pods) -> None:
    async with (
        api_server() as cluster,
        running_operator(cluster, read_timeout_seconds=READ_TIMEOUT, finalizer_timeout_seconds=3, retry_seconds=0.5),
    ):
        await serve_add_model(cluster, pods, ("triton-a", "triton-b"))
        await cluster.wait("ready on both pods", lambda: model_status(cluster).get("replicas") == "2/2", timeout=60)
        healthy, _ = await edit(cluster, 200)

        hang(pods.tritons["triton-b"])
        try:
            with_hung_pod, _ = await edit(cluster, 300)
            assert with_hung_pod <= healthy + READ_TIMEOUT + SLACK, (healthy, with_hung_pod)
            assert (
                gate(cluster, "triton-a") == "True" and gate(cluster, "triton-b") == "True"
            )  # the hung pod stays in service
            await cluster.wait(
                "the hung pod unreachable in the status",
                lambda: replica_state(cluster, "triton-b") == "UNREACHABLE",
                timeout=READ_TIMEOUT + SLACK,
            )
            loaded = cluster.condition("TritonModel", "add", "Loaded") or {}
            assert (
                loaded.get("status") == "False"
                and loaded.get("reason") == "PodUnreachable"
                and "triton-b" in loaded.get("message", "")
            )

            deleted = time.monotonic()
            await cluster.delete("TritonModel", "add")
            await cluster.wait(
                "the model released at its finalizer bound",
                lambda: cluster.get("TritonModel", "add") is None,
                timeout=60,
            )
            assert time.monotonic() - deleted <= 3 + READ_TIMEOUT + SLACK
            await cluster.wait(
                "its Warning Event",
                lambda: any(e["reason"] == "UnloadTimedOut" for e in cluster.all("Event")),
                timeout=10,
            )
            assert gate(cluster, "triton-b") == "True"
        finally:
            resume(pods.tritons["triton-b"])
        await cluster.wait(
            "the model unloaded from the resumed pod too",
            lambda: cluster.get("TritonServer", "triton")["status"].get("managedModels") == [],
            timeout=60,
        )


def pods_in_state(state: str) -> float:
    return next(
        (
            s.value
            for f in metrics.REGISTRY.collect()
            if f.name == "triton_operator_pods"
            for s in f.samples
            if s.labels == {"namespace": "default", "server": "triton", "state": state}
        ),
        0.0,
    )


@pytest.mark.triton
async def test_a_refused_key_never_takes_a_serving_pod_out_of_service(pods: Pods) -> None:
    async with api_server() as cluster, running_operator(cluster, read_timeout_seconds=READ_TIMEOUT):
        await serve_add_model(cluster, pods, ("triton-a", "triton-b"), key="not-the-operator-key")
        for name in ("triton-a", "triton-b"):  # in service before: as if their gates were set by an earlier operator
            condition = {"type": "triton-operator.io/models-ready", "status": "True", "reason": "Loaded"}
            await cluster.patch("Pod", name, {"status": {"conditions": [condition]}}, subresource="status")

        def unreachable_everywhere() -> bool:
            states = model_status(cluster).get("replicaStates", [])
            return len(states) == 2 and all(s["state"] == "UNREACHABLE" for s in states)

        await cluster.wait("both pods reported unreachable", unreachable_everywhere, timeout=60)
        assert all("restricted" in s["reason"] for s in model_status(cluster)["replicaStates"]), [
            s["reason"] for s in model_status(cluster)["replicaStates"]
        ]  # Triton's words for a refused key

        def unconfirmed() -> bool:
            return (cluster.condition("TritonServer", "triton", "ModelsReady") or {}).get("reason") == "PodUnreachable"

        await cluster.wait("the server says its pods are unconfirmed", unconfirmed, timeout=30)
        assert gate(cluster, "triton-a") == "True" and gate(cluster, "triton-b") == "True"
        assert pods_in_state("Unreachable") == 2
        assert cluster.get("TritonServer", "triton")["status"]["readyReplicas"] == 2  # still serving


async def test_a_refused_status_write_is_written_again_within_seconds() -> None:
    async with api_server() as cluster:
        fault = ApiFault("PATCH", r"/tritonmodels/add/status$", status=500, times=1)
        cluster.server.faults.append(fault)
        async with running_operator(cluster, resync_seconds=60, retry_seconds=1):
            for obj in (SERVER, FILES, MODEL):
                await cluster.create(copy.deepcopy(obj))
            await cluster.wait("the refused write", lambda: fault.seen == 1, timeout=30)
            refused = time.monotonic()
            await cluster.wait("the status written", lambda: model_status(cluster).get("conditions"), timeout=30)
            assert time.monotonic() - refused <= RETRY_BOUND


@pytest.mark.triton
async def test_a_refused_readiness_write_is_written_again_within_seconds(pods: Pods) -> None:
    async with api_server() as cluster:
        fault = ApiFault("PATCH", r"/pods/triton-a/status$", status=500, times=1, identity=f"Bearer {OPERATOR_TOKEN}")
        cluster.server.faults.append(fault)
        async with running_operator(cluster, resync_seconds=60, retry_seconds=1):
            await serve_add_model(cluster, pods, ("triton-a",))
            await cluster.wait("the refused write", lambda: fault.seen == 1, timeout=60)
            refused = time.monotonic()
            await cluster.wait("the pod in service", lambda: gate(cluster, "triton-a") == "True", timeout=30)
            assert time.monotonic() - refused <= RETRY_BOUND


SLOW_LOAD_SECONDS = 15


def loads_in_log(triton: LocalTriton, model: str) -> int:
    """How many loads of the model Triton began: each load call it takes logs "loading: <model>:<version>"."""
    return triton.log_path.read_text(errors="replace").count(f'"loading: {model}:')


@pytest.mark.triton
async def test_an_operator_restarted_mid_load_does_not_load_again(pods: Pods) -> None:
    async with api_server() as cluster:
        slow_files = copy.deepcopy(FILES)
        slow_files["data"]["model.py"] = add_code(initialize=f"time.sleep({SLOW_LOAD_SECONDS})").decode()
        async with running_operator(cluster, read_timeout_seconds=READ_TIMEOUT):
            for obj in (SERVER, slow_files, MODEL):
                await cluster.create(copy.deepcopy(obj))
            key = await cluster.wait("the control key", lambda: cluster.control_key("triton"))
            await add_pod(cluster, pods, "triton-a", key)
            triton = pods.tritons["triton-a"]
            await cluster.wait("the load begun", lambda: loads_in_log(triton, "add") == 1, timeout=30)

            def managed() -> bool:
                return "add" in (cluster.get("TritonServer", "triton") or {}).get("status", {}).get("managedModels", [])

            await cluster.wait("the model managed", managed, timeout=10)
        assert not await asyncio.to_thread(ready_on, triton.grpc_url)  # stopped mid-load
        async with running_operator(cluster, read_timeout_seconds=READ_TIMEOUT):
            await cluster.wait(
                "ready", lambda: model_status(cluster).get("replicas") == "1/1", timeout=SLOW_LOAD_SECONDS + 30
            )
        assert loads_in_log(triton, "add") == 1


def ready_on(url: str) -> bool:
    client = grpcclient.InferenceServerClient(url)
    try:
        return client.is_model_ready("add")
    finally:
        client.close()
