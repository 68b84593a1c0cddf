"""On a GPU: the CUDA shared-memory pool carries several tensors each way through one region, and a
KIND_GPU python model runs its instances on the GPU its server was given, as Triton's config, log and
GPU metrics say. Each test skips, saying why, where there is no GPU; `make gpu-check` runs them."""

from __future__ import annotations

import re
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.support.models import load, python_model
from tests.support.ports import free_ports
from triton_operator.api.server import TritonServerSpec
from triton_operator.client import CudaRegions, SharedMemoryPool
from triton_operator.local.tritonserver import LocalTriton, Ports

pytestmark = [pytest.mark.triton, pytest.mark.gpu]

# SUM = A + B and PRODUCT = A * B, and DEVICE: the GPU its instance was given.
ADD_MUL_CODE = textwrap.dedent("""
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def initialize(self, args):
            self.device = int(args["model_instance_device_id"])

        def execute(self, requests):
            responses = []
            for request in requests:
                a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
                b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
                outputs = [pb_utils.Tensor("SUM", a + b), pb_utils.Tensor("PRODUCT", a * b),
                           pb_utils.Tensor("DEVICE", np.array([self.device], np.int32))]
                responses.append(pb_utils.InferenceResponse(outputs))
            return responses
""").encode()
TENSOR = {"dataType": "TYPE_FP32", "dims": [-1]}
CONFIG = {
    "backend": "python",
    "maxBatchSize": 0,
    "input": [{"name": "A", **TENSOR}, {"name": "B", **TENSOR}],
    "output": [
        {"name": "SUM", **TENSOR},
        {"name": "PRODUCT", **TENSOR},
        {"name": "DEVICE", "dataType": "TYPE_INT32", "dims": [1]},
    ],
    "instanceGroup": [{"kind": "KIND_GPU", "count": 2, "gpus": [0]}],
}


@pytest.fixture(scope="module")
def gpu_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTriton]:
    spec = TritonServerSpec.model_validate(
        {"exitTimeoutSeconds": 5, "gpus": {"count": 1}, "memoryPools": {"cudaBytesPerGpu": "256Mi"}}
    )
    with LocalTriton(spec, tmp_path_factory.mktemp("gpu"), Ports(*free_ports(3))) as server:
        load(server, python_model("add_mul", CONFIG, ADD_MUL_CODE))
        yield server


def test_the_server_sees_the_one_gpu_it_asked_for(gpu_triton: LocalTriton) -> None:
    assert gpu_triton.process is not None
    environ = dict(
        entry.split("=", 1)
        for entry in Path(f"/proc/{gpu_triton.process.pid}/environ").read_text().split("\0")
        if "=" in entry
    )
    assert environ["CUDA_VISIBLE_DEVICES"] == gpu_triton.visible_gpus != ""
    assert "CUDA memory pool is created on device 0 with size 268435456" in gpu_triton.log_tail(500_000)


def test_a_kind_gpu_model_has_its_instances_on_the_gpu(gpu_triton: LocalTriton) -> None:
    client = grpcclient.InferenceServerClient(gpu_triton.grpc_url)
    try:
        (group,) = client.get_model_config("add_mul").config.instance_group
        assert (
            grpcclient.model_config_pb2.ModelInstanceGroup.Kind.Name(group.kind),
            group.count,
            list(group.gpus),
        ) == ("KIND_GPU", 2, [0])
        values = np.arange(4, dtype=np.float32)
        inputs = [grpcclient.InferInput(name, [4], "FP32") for name in ("A", "B")]
        for infer_input in inputs:
            infer_input.set_data_from_numpy(values)
        result = client.infer("add_mul", inputs)
        assert result.as_numpy("SUM").tolist() == (values * 2).tolist()
        assert result.as_numpy("DEVICE").tolist() == [0]
    finally:
        client.close()
    log = gpu_triton.log_tail(500_000)
    assert re.search(r"TRITONBACKEND_ModelInstanceInitialize: add_mul_0_0 \(GPU device 0\)", log), log[-3000:]
    assert re.search(r"TRITONBACKEND_ModelInstanceInitialize: add_mul_0_1 \(GPU device 0\)", log), log[-3000:]


def test_triton_reports_gpu_metrics(gpu_triton: LocalTriton) -> None:
    """Triton samples GPU metrics every --metrics-interval-ms (2 s by default): until the GPU's total
    memory reads above 0, no sample has been taken."""
    url = f"http://{gpu_triton.address}:{gpu_triton.ports.metrics}/metrics"

    def gauge(name: str, text: str) -> list[float]:
        return [float(value) for value in re.findall(rf'^{name}\{{gpu_uuid="GPU-[^"]+"\}} (\S+)$', text, re.MULTILINE)]

    deadline = time.monotonic() + 30
    while True:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        if any(gauge("nv_gpu_memory_total_bytes", text)) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    used, total, utilization = (
        gauge(name, text) for name in ("nv_gpu_memory_used_bytes", "nv_gpu_memory_total_bytes", "nv_gpu_utilization")
    )
    metrics_log = [
        line for line in gpu_triton.log_tail(500_000).splitlines() if "metric" in line.lower() or "dcgm" in line.lower()
    ]
    print(f"GPU metrics: used {used}, total {total}, utilization {utilization}; Triton on metrics: {metrics_log}")
    assert len(total) == 1 and total[0] > 0, f"no GPU sample in 30 s: {metrics_log}"
    assert len(used) == 1 and 0 < used[0] <= total[0]
    assert len(utilization) == 1 and 0 <= utilization[0] <= 1


def test_the_cuda_pool_carries_several_tensors_each_way_in_one_region(gpu_triton: LocalTriton) -> None:
    client = grpcclient.InferenceServerClient(gpu_triton.grpc_url)
    a = np.linspace(-1, 1, 1000, dtype=np.float32)
    b = np.arange(1000, dtype=np.float32)
    with SharedMemoryPool(client, regions=2, region_bytes=1 << 16, prefix="cudatest", kind=CudaRegions()) as pool:
        assert sorted(client.get_cuda_shared_memory_status().regions) == ["cudatest_0", "cudatest_1"]
        for _ in range(3):  # a region is reused lease after lease
            with pool.lease() as region:
                inputs = [grpcclient.InferInput(name, [1000], "FP32") for name in ("A", "B")]
                offsets = [region.put(inputs[0], a), region.put(inputs[1], b)]
                outputs = [grpcclient.InferRequestedOutput(name) for name in ("SUM", "PRODUCT", "DEVICE")]
                offsets += [
                    region.expect(outputs[0], a.nbytes),
                    region.expect(outputs[1], a.nbytes),
                    region.expect(outputs[2], 4),
                ]
                assert offsets == sorted(set(offsets)) and offsets[0] == 0  # one after another, none at the same place
                result = client.infer("add_mul", inputs, outputs=outputs)
                assert region.read("SUM", result).tolist() == (a + b).tolist()
                assert region.read("PRODUCT", result).tolist() == (a * b).tolist()
                assert region.read("DEVICE", result).tolist() == [0]
    assert client.get_cuda_shared_memory_status().regions == {}
    client.close()
