"""status.memory Measured: the operator reads each pod's memory sidecar after its loads, in the mini
cluster (whose kubelet serves the sidecar for its pod's processes), with real tritonservers; and a
sidecar that does not answer changes nothing."""

from __future__ import annotations

import copy
import logging
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.minicluster import operated_cluster
from tests.support.operator import Pods, api_server, assert_valid_objects, running_operator
from tests.support.resources import SERVER, python_model_documents

MiB = 1 << 20
STUB_BASELINE_MIB = 16.5  # a stub's private memory when model.py holds nothing (docs/triton-facts.md)
HELD_MIB = 64
INSTANCES = 2
HOLDING = textwrap.dedent(f"""\
    import numpy as np

    class TritonPythonModel:
        def initialize(self, args):
            self.held = np.ones({HELD_MIB} << 20, np.uint8)  # touched: every page is the stub's own

        def execute(self, requests):
            return []
    """).encode()
CONFIG = {
    "backend": "python",
    "maxBatchSize": 0,
    "instanceGroup": [{"kind": "KIND_CPU", "count": INSTANCES}],
    "input": [{"name": "IN", "dataType": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUT", "dataType": "TYPE_FP32", "dims": [-1]}],
}


def server(replicas: int) -> dict[str, Any]:
    server = copy.deepcopy(SERVER)
    server["spec"] |= {"replicas": replicas, "memoryReader": {"enabled": True}}
    return server


def memory_of(cluster: Any, model: str) -> dict[str, Any]:
    return ((cluster.get("TritonModel", model) or {}).get("status") or {}).get("memory") or {}


@pytest.mark.triton
@pytest.mark.slow
async def test_a_model_is_measured_by_its_pods_memory_sidecar(tmp_path: Path) -> None:
    async with operated_cluster(tmp_path, memory_read_seconds=1) as mini:
        cluster = mini.cluster
        for document in [server(replicas=1), *python_model_documents("holds", CONFIG, HOLDING)]:
            await cluster.create(document)
        measured = await cluster.wait(
            "the figure measured",
            lambda: (m := memory_of(cluster, "holds")).get("source") == "Measured" and m,
            timeout=120,
        )
        assert measured["cpuBytes"] == pytest.approx(INSTANCES * (HELD_MIB + STUB_BASELINE_MIB) * MiB, rel=0.10)
        assert measured["measuredAt"] and measured["gpuBytes"] == 0

        # Adding the model rolled the pod (its memory request is derived from the models): the replaced one may
        # still drain.
        def live() -> list[dict[str, Any]]:
            return [pod for pod in mini.pods_of("triton") if not pod["metadata"].get("deletionTimestamp")]

        (pod,) = await cluster.wait("the roll finished", lambda: len(live()) == 1 and live())
        assert [c["name"] for c in pod["spec"]["containers"]] == ["tritonserver", "memory-reader"] and pod["spec"][
            "shareProcessNamespace"
        ]
        assert_valid_objects(cluster)


@pytest.mark.triton
async def test_a_sidecar_that_does_not_answer_changes_nothing(pods: Pods, caplog: pytest.LogCaptureFixture) -> None:
    """The pod has no sidecar listening (a crashed one): the model is Ready there, its pod in service,
    its figure the default, as without a reader."""
    async with api_server() as cluster, running_operator(cluster, memory_read_seconds=0.1):
        with caplog.at_level(logging.WARNING, logger="triton_operator"):
            for document in [server(replicas=1), *python_model_documents("holds", CONFIG, HOLDING)]:
                await cluster.create(document)
            key = await cluster.wait("the control key", lambda: cluster.control_key("triton"))
            triton = pods.start("triton-a", key)
            await cluster.add_pod("triton", "triton-a", triton.address, triton.ports.grpc)
            await cluster.wait(
                "the model ready",
                lambda: (cluster.condition("TritonModel", "holds", "Ready") or {}).get("status") == "True",
            )
            await cluster.wait(
                "a reading tried",
                lambda: any("memory sidecar of pod triton-a" in r.getMessage() for r in caplog.records),
            )
        await cluster.wait(
            "the pod in service", lambda: (cluster.pod_condition("triton-a") or {}).get("status") == "True"
        )
        assert memory_of(cluster, "holds") == {"cpuBytes": 20 * MiB, "gpuBytes": 0, "source": "Default"}
        assert cluster.condition("TritonModel", "holds", "Ready")["status"] == "True"
        assert_valid_objects(cluster)
