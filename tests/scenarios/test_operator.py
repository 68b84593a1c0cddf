"""The operator in-process on kmock's emulated API server, with real tritonservers as a server's pods.

Everything the operator writes is checked as a real API server would check it: manifests against
the Kubernetes schema (strict), our custom resources and their statuses against the CRDs
(schema and CEL rules).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
import tritonclient.grpc as grpcclient

from tests.support.bursts import MIXED, burst, counted_statistics
from tests.support.models import ADD_CONFIG, SUM_CODE, add_code, sum_config
from tests.support.operator import Cluster, Pods, api_server, assert_valid_objects, load_calls, running_operator
from tests.support.resources import FILES, MODEL, SERVER, python_model_documents
from tests.support.serving import RequestLoop, answers_with, infer, model_ready_at
from triton_operator.k8s.process import metrics
from triton_operator.protocol.names import GRPC_CONTROL_METADATA
from triton_operator.triton.client import ControlClient


@pytest.mark.triton
async def test_models_reach_every_pod_and_stay_there(pods: Pods) -> None:
    async with api_server() as cluster:
        async with running_operator(cluster, resync_seconds=1):
            for obj in (SERVER, FILES, MODEL):
                await cluster.create(copy.deepcopy(obj))
            await cluster.wait(
                "children",
                lambda: all(
                    cluster.get(k, n)
                    for k, n in [
                        ("Deployment", "triton"),
                        ("Service", "triton"),
                        ("Secret", "triton-control"),
                        ("ConfigMap", "add-config"),
                    ]
                ),
            )
            key = cluster.control_key("triton")
            assert key
            tritons = [pods.start(name, key) for name in ("triton-a", "triton-b")]
            for name, triton in zip(("triton-a", "triton-b"), tritons, strict=False):
                await cluster.add_pod("triton", name, triton.address, triton.ports.grpc)

            status = await cluster.wait("the model ready on both pods", lambda: model_ready_at(cluster))
            assert {s["pod"] for s in status["replicaStates"]} == {"triton-a", "triton-b"}
            for name in ("triton-a", "triton-b"):
                assert (cluster.pod_condition(name) or {}).get("status") == "True"
            assert [infer(t.grpc_url) for t in tritons] == [[2.0] * 4] * 2
            server_status = await cluster.wait(
                "server ready",
                lambda: (cluster.get("TritonServer", "triton") or {}).get("status", {}).get("readyReplicas") == 2,
            )
            assert server_status
            assert cluster.get("TritonServer", "triton")["status"]["managedModels"] == ["add"]
            assert_valid_objects(cluster)

            # A config edit reloads in place on every pod while clients keep sending.
            first = status["configHash"]
            with RequestLoop([t.grpc_url for t in tritons]) as loop:
                await cluster.patch(
                    "TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": 200}}}}
                )
                status = await cluster.wait(
                    "the new revision on both pods", lambda: model_ready_at(cluster, revision_not=first)
                )
            assert loop.failures == [] and loop.sent > 0
            assert {s["revision"] for s in status["replicaStates"]} == {status["configHash"]}

            # Edited files reload the model that uses them.
            await cluster.patch("ConfigMap", "add-files", {"data": {"model.py": add_code(offset=1.0).decode()}})
            await cluster.wait_async(
                "new code on both pods",
                lambda: asyncio.to_thread(lambda: all(infer(t.grpc_url) == [3.0] * 4 for t in tritons)),
            )
            # Triton serves the new code a moment before its load call returns: the status says when both returned.
            await cluster.wait(
                "the files' revision in the status", lambda: model_ready_at(cluster, revision_not=status["configHash"])
            )

            # An invalid edit is refused with its message; nothing is sent to Triton, the old version serves.
            loads = load_calls()
            await cluster.patch(
                "TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"preferredBatchSize": [32]}}}}
            )
            refused = await cluster.wait(
                "ConfigValid=False",
                lambda: (c := cluster.condition("TritonModel", "add", "ConfigValid")) and c["status"] == "False" and c,
            )
            assert "preferredBatchSize" in refused["message"] and refused["reason"] == "InvalidSpec"
            assert load_calls() == loads
            assert [infer(t.grpc_url) for t in tritons] == [[3.0] * 4] * 2
            await cluster.patch(
                "TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"preferredBatchSize": [4]}}}}
            )
            await cluster.wait("valid again", lambda: model_ready_at(cluster))

            # A restarted pod (its Triton starts empty) is refilled, and ready again, with no CR touched.
            await asyncio.to_thread(pods.restart, "triton-a")
            await cluster.wait_async(
                "refilled", lambda: asyncio.to_thread(answers_with, tritons[0].grpc_url, [3.0] * 4)
            )
            await cluster.wait(
                "pod ready again", lambda: (cluster.pod_condition("triton-a") or {}).get("status") == "True"
            )

            # A model unloaded by hand comes back with the resync.
            client = grpcclient.InferenceServerClient(tritons[1].grpc_url)
            client.unload_model("add", headers={GRPC_CONTROL_METADATA: key})
            client.close()
            await cluster.wait_async(
                "restored by the resync", lambda: asyncio.to_thread(answers_with, tritons[1].grpc_url, [3.0] * 4)
            )
            await cluster.wait("ready after the resync", lambda: model_ready_at(cluster))
            assert_valid_objects(cluster)

        # The operator restarted with everything loaded makes no load calls.
        loads = load_calls()
        async with running_operator(cluster) as operator:
            await cluster.wait("the worker", lambda: ("default", "triton") in operator.workers.running)
            worker = operator.workers.get(("default", "triton"))
            await worker.next_pass()
            await worker.next_pass()
            assert load_calls() == loads

            # A deleted model is unloaded from every pod before its finalizer goes.
            await cluster.delete("TritonModel", "add")
            await cluster.wait("the model gone", lambda: cluster.get("TritonModel", "add") is None)
            for triton in tritons:
                assert not answers_with(triton.grpc_url, [3.0] * 4)
            await cluster.wait(
                "server forgets it", lambda: cluster.get("TritonServer", "triton")["status"]["managedModels"] == []
            )


async def test_model_waits_for_its_server() -> None:
    async with api_server() as cluster, running_operator(cluster):
        model = copy.deepcopy(MODEL)
        model["spec"]["serverRef"] = {"name": "later"}
        await cluster.create(copy.deepcopy(FILES))
        await cluster.create(model)
        waiting = await cluster.wait(
            "ServerNotFound", lambda: (c := cluster.condition("TritonModel", "add", "Loaded")) and c
        )
        assert waiting["reason"] == "ServerNotFound" and "later" in waiting["message"]
        server = copy.deepcopy(SERVER)
        server["metadata"]["name"] = "later"
        await cluster.create(server)
        await cluster.wait(
            "NoPods once the server exists",
            lambda: (c := cluster.condition("TritonModel", "add", "Loaded")) and c["reason"] == "NoPods",
        )
        assert cluster.get("Deployment", "later") is not None
        assert_valid_objects(cluster)


async def test_a_models_memory_figure_is_in_its_status_and_a_metric() -> None:
    async with api_server() as cluster, running_operator(cluster):
        model = copy.deepcopy(MODEL)
        model["spec"]["memory"] = {"cpu": "80Mi", "gpu": "1Gi"}
        await cluster.create(copy.deepcopy(FILES))
        await cluster.create(copy.deepcopy(SERVER))
        await cluster.create(model)
        declared = await cluster.wait(
            "the declared figure", lambda: (cluster.get("TritonModel", "add") or {}).get("status", {}).get("memory")
        )
        assert declared == {"cpuBytes": 80 << 20, "gpuBytes": 1 << 30, "source": "Declared"}
        assert (
            metric(
                "triton_operator_model_memory_bytes", namespace="default", server="triton", model="add", memory="cpu"
            )
            == 80 << 20
        )
        await cluster.patch("TritonModel", "add", {"spec": {"memory": None}})
        default = await cluster.wait(
            "the default figure",
            lambda: (m := cluster.get("TritonModel", "add")["status"]["memory"]) and m["source"] == "Default" and m,
        )
        assert default == {
            "cpuBytes": 20 << 20,
            "gpuBytes": 0,
            "source": "Default",
        }  # the least a python model was seen to cost
        await cluster.wait(
            "the metric follows",
            lambda: (
                metric(
                    "triton_operator_model_memory_bytes",
                    namespace="default",
                    server="triton",
                    model="add",
                    memory="cpu",
                )
                == 20 << 20
            ),
        )
        assert_valid_objects(cluster)


def metric(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels)


def batching_condition(cluster: Cluster, status: str) -> dict[str, Any] | None:
    condition = cluster.condition("TritonModel", "mixed", "BatchingEffective")
    return condition if condition and condition["status"] == status else None


@pytest.mark.triton
async def test_batching_verdict_in_the_model_status_and_metrics(pods: Pods) -> None:
    """Mixed-length requests to a `dims: [-1]` model without allowRaggedBatch run in small batches;
    the status says so and names the fix; with it set, the same burst fills batches."""
    server = copy.deepcopy(SERVER)
    server["spec"]["replicas"] = 1
    files, model = python_model_documents("mixed", sum_config(ragged=False), SUM_CODE)
    labels = {"namespace": "default", "server": "triton", "model": "mixed"}
    async with api_server() as cluster, running_operator(cluster) as operator:
        for obj in (server, files, model):
            await cluster.create(obj)
        key = await cluster.wait("the control key", lambda: cluster.control_key("triton"))
        triton = pods.start("triton-a", key)
        await cluster.add_pod("triton", "triton-a", triton.address, triton.ports.grpc)
        ready = await cluster.wait(
            "ready",
            lambda: (s := (cluster.get("TritonModel", "mixed") or {}).get("status", {})).get("replicas") == "1/1" and s,
        )
        worker = operator.workers.get(("default", "triton"))

        async def burst_then_pass(counted: int) -> None:
            await burst(triton.grpc_url, "mixed", MIXED)
            async with ControlClient(triton.grpc_url, key) as client:
                await counted_statistics(client, "mixed", counted)
            await worker.next_pass()

        await burst_then_pass(32)
        verdict = await cluster.wait("BatchingEffective=False", lambda: batching_condition(cluster, "False"))
        assert verdict["reason"] == "RaggedBatchNotAllowed" and "allowRaggedBatch: true" in verdict["message"], verdict
        batching = cluster.get("TritonModel", "mixed")["status"]["batching"]
        # A pass may fall inside the burst: the verdict comes from a window of at least 16 of the 32.
        assert (
            16 <= batching["requests"] <= 32 and batching["averageBatchSize"] < 4 and batching["maxBatchSize"] == 16
        ), batching
        assert sum(batching["batchSizes"].values()) == batching["executions"]
        assert metric("triton_operator_batching_effective", **labels) == 0
        assert_valid_objects(cluster)

        # A quiet pass is too little to judge: the verdict stands.
        await worker.next_pass()
        assert batching_condition(cluster, "False") == verdict

        # allowRaggedBatch set: reloaded, and the same burst fills batches.
        config = sum_config(ragged=True)
        await cluster.patch("TritonModel", "mixed", {"spec": {"config": {"input": config["input"]}}})
        await cluster.wait(
            "the new revision",
            lambda: (
                (s := cluster.get("TritonModel", "mixed")["status"]).get("configHash") != ready["configHash"]
                and s.get("replicas") == "1/1"
            ),
        )
        await burst_then_pass(32)
        filled = await cluster.wait("BatchingEffective=True", lambda: batching_condition(cluster, "True"))
        assert filled["reason"] == "BatchesFill", filled
        assert cluster.get("TritonModel", "mixed")["status"]["batching"]["averageBatchSize"] > 8
        assert metric("triton_operator_batching_effective", **labels) == 1
        assert (metric("triton_operator_average_batch_size", **labels) or 0) > 8
        assert_valid_objects(cluster)

        await cluster.delete("TritonModel", "mixed")
        await cluster.wait("the model gone", lambda: cluster.get("TritonModel", "mixed") is None)
        await worker.next_pass()
        assert metric("triton_operator_batching_effective", **labels) is None


FAILING_CODE = b"""
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("weights.bin is missing from the model folder")
"""


def loaded_condition(cluster: Cluster, model: str, reason: str) -> dict[str, Any] | None:
    condition = cluster.condition("TritonModel", model, "Loaded")
    return condition if condition and condition["reason"] == reason else None


@pytest.mark.triton
async def test_a_load_triton_refuses_is_reported_in_its_words_and_not_retried(pods: Pods) -> None:
    server = copy.deepcopy(SERVER)
    server["spec"]["replicas"] = 1
    async with api_server() as cluster, running_operator(cluster, resync_seconds=1) as operator:
        for obj in (server, FILES, MODEL):
            await cluster.create(copy.deepcopy(obj))
        key = await cluster.wait("the control key", lambda: cluster.control_key("triton"))
        triton = pods.start("triton-a", key)
        await cluster.add_pod("triton", "triton-a", triton.address, triton.ports.grpc)
        await cluster.wait("loaded", lambda: loaded_condition(cluster, "add", "Loaded"))

        # New files whose model cannot start: Triton refuses the load and keeps the old version serving.
        await cluster.patch("ConfigMap", "add-files", {"data": {"model.py": FAILING_CODE.decode()}})
        refused = await cluster.wait("LoadFailed", lambda: loaded_condition(cluster, "add", "LoadFailed"))
        assert (
            "triton-a" in refused["message"] and "weights.bin is missing from the model folder" in refused["message"]
        ), refused
        ready = cluster.condition("TritonModel", "add", "Ready")
        assert ready["status"] == "False" and ready["reason"] == "LoadFailed"
        [state] = cluster.get("TritonModel", "add")["status"]["replicaStates"]
        assert state["state"] == "READY" and "weights.bin" in state["reason"], state  # the old revision serves
        assert infer(triton.grpc_url) == [2.0] * 4

        # Not retried until something changes: resync passes make no load call.
        worker = operator.workers.get(("default", "triton"))
        loads = load_calls()
        await worker.next_pass()
        await worker.next_pass()
        assert load_calls() == loads

        await cluster.patch("ConfigMap", "add-files", {"data": {"model.py": add_code(offset=1.0).decode()}})
        await cluster.wait("loaded again", lambda: loaded_condition(cluster, "add", "Loaded"))
        assert infer(triton.grpc_url) == [3.0] * 4


@pytest.mark.triton
async def test_an_inline_server_is_owned_by_its_model_and_a_moved_model_leaves_its_old_server(pods: Pods) -> None:
    server = copy.deepcopy(SERVER)
    server["spec"]["replicas"] = 1
    solo = {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonModel",
        "metadata": {"name": "solo"},
        "spec": {
            "server": {"backends": ["python"], "exitTimeoutSeconds": 5},
            "config": ADD_CONFIG,
            "files": MODEL["spec"]["files"],
        },
    }
    async with api_server() as cluster, running_operator(cluster):
        for obj in (server, FILES, MODEL, solo):
            await cluster.create(copy.deepcopy(obj))

        # The inline server: a TritonServer named after the model, owned by it, with children of its own.
        child = await cluster.wait("the inline server", lambda: cluster.get("TritonServer", "solo"))
        [owner] = child["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == (
            "TritonModel",
            "solo",
            cluster.get("TritonModel", "solo")["metadata"]["uid"],
        )
        assert owner.get("controller") is True
        tritons = {}
        for name in ("triton", "solo"):
            key = await cluster.wait(f"{name}'s control key", lambda name=name: cluster.control_key(name))
            tritons[name] = pods.start(f"{name}-pod", key)
            await cluster.add_pod(name, f"{name}-pod", tritons[name].address, tritons[name].ports.grpc)
        await cluster.wait("solo loaded", lambda: loaded_condition(cluster, "solo", "Loaded"))
        await cluster.wait("add loaded", lambda: loaded_condition(cluster, "add", "Loaded"))
        assert infer(tritons["solo"].grpc_url, "solo") == [2.0] * 4
        assert_valid_objects(cluster)

        # `add` moves to the inline server: loaded there, unloaded from the server it left.
        await cluster.patch("TritonModel", "add", {"spec": {"serverRef": {"name": "solo"}}})
        await cluster.wait_async(
            "add served by solo", lambda: asyncio.to_thread(answers_with, tritons["solo"].grpc_url, [2.0] * 4)
        )
        await cluster.wait_async(
            "add gone from triton",
            lambda: asyncio.to_thread(lambda: not answers_with(tritons["triton"].grpc_url, [2.0] * 4)),
        )
        await cluster.wait(
            "triton forgets add", lambda: cluster.get("TritonServer", "triton")["status"].get("managedModels") == []
        )
        status = await cluster.wait(
            "add ready on solo",
            lambda: (
                (s := cluster.get("TritonModel", "add")["status"]).get("server") == "solo"
                and s.get("replicas") == "1/1"
                and s
            ),
        )
        assert [r["pod"] for r in status["replicaStates"]] == ["solo-pod"]


async def test_the_resync_restores_children_someone_deleted() -> None:
    async with api_server() as cluster, running_operator(cluster, resync_seconds=1):
        for obj in (SERVER, FILES, MODEL):
            await cluster.create(copy.deepcopy(obj))
        children = [("Deployment", "triton"), ("Service", "triton"), ("ConfigMap", "add-config")]
        first = await cluster.wait(
            "the children",
            lambda: all(cluster.get(*child) for child in children) and [cluster.get(*child) for child in children],
        )
        for kind, name in children:
            await cluster.delete(kind, name)
        again = await cluster.wait(
            "the children back",
            lambda: all(cluster.get(*child) for child in children) and [cluster.get(*child) for child in children],
        )
        assert [obj["metadata"]["uid"] for obj in again] != [obj["metadata"]["uid"] for obj in first]  # made anew
        assert [obj.get("spec", obj.get("data")) for obj in again] == [
            obj.get("spec", obj.get("data")) for obj in first
        ]
        assert_valid_objects(cluster)
