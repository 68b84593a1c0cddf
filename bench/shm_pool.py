"""Client shared-memory pool vs plain HTTP (binary tensors), with memcpy as the ceiling.

Serves an identity python model (output = input) on a local tritonserver from the nvidia-pytriton
wheel and times full requests with the same HTTP client both ways: tensors sent and received as
binary HTTP bodies, or put into and read from a leased system shared-memory region. memcpy times
the same bytes copied in and out in this process, the least any transport can cost.

    .venv/bin/python bench/shm_pool.py [--repeats 30]

Prints a Markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.ports import free_ports  # noqa: E402
from triton_operator.api.resources import TritonModel  # noqa: E402
from triton_operator.api.server import TritonServerSpec  # noqa: E402
from triton_operator.client import SharedMemoryPool  # noqa: E402
from triton_operator.local.tritonserver import LocalTriton, Ports  # noqa: E402
from triton_operator.render.config import build_model_config  # noqa: E402
from triton_operator.triton.client import ControlClient  # noqa: E402
from triton_operator.triton.sync import DesiredModel, Replica  # noqa: E402

MiB = 1 << 20
IDENTITY = textwrap.dedent(
    """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
                    for r in requests]
    """
).encode()
MODEL = {
    "apiVersion": "triton-operator.io/v1alpha1",
    "kind": "TritonModel",
    "metadata": {"name": "identity"},
    "spec": {
        "serverRef": {"name": "bench"},
        "config": {
            "backend": "python",
            "maxBatchSize": 0,
            "input": [{"name": "IN", "dataType": "TYPE_FP32", "dims": [-1]}],
            "output": [{"name": "OUT", "dataType": "TYPE_FP32", "dims": [-1]}],
            "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
        },
    },
}


def load_identity(triton: LocalTriton) -> None:
    files = {"1/model.py": IDENTITY}
    desired = DesiredModel.from_config(build_model_config(TritonModel.model_validate(MODEL), files), files)

    async def load() -> None:
        async with ControlClient(triton.grpc_url) as client:
            report = await Replica(client).sync({"identity": desired})
            assert report.ok, report

    asyncio.run(load())


def timed(run, repeats: int) -> list[float]:
    for _ in range(3):
        run()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return times


def plain_http(client: httpclient.InferenceServerClient, data: np.ndarray) -> None:
    infer_input = httpclient.InferInput("IN", list(data.shape), "FP32")
    infer_input.set_data_from_numpy(data, binary_data=True)
    result = client.infer("identity", [infer_input], outputs=[httpclient.InferRequestedOutput("OUT", binary_data=True)])
    assert result.as_numpy("OUT").nbytes == data.nbytes


def through_pool(client: httpclient.InferenceServerClient, pool: SharedMemoryPool, data: np.ndarray) -> None:
    with pool.lease() as region:
        infer_input = httpclient.InferInput("IN", list(data.shape), "FP32")
        region.put(infer_input, data)
        output = httpclient.InferRequestedOutput("OUT")
        region.expect(output, data.nbytes)
        result = client.infer("identity", [infer_input], outputs=[output])
        assert region.read("OUT", result).nbytes == data.nbytes


def memcpy(data: np.ndarray, buffer: np.ndarray, back: np.ndarray) -> None:
    np.copyto(buffer, data)
    np.copyto(back, buffer)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        spec = TritonServerSpec.model_validate({"exitTimeoutSeconds": 5, "pythonBackend": {"shmDefaultBytes": "64Mi"}})
        with LocalTriton(spec, Path(workdir), Ports(*free_ports(3))) as triton:
            load_identity(triton)
            client = httpclient.InferenceServerClient(triton.http_url.removeprefix("http://"), network_timeout=120)
            with SharedMemoryPool(client, regions=2, region_bytes=64 * MiB, prefix="bench") as pool:
                for size in (3 * MiB, 25 * MiB):
                    data = np.random.default_rng(0).random(size // 4, dtype=np.float32)
                    buffer, back = np.empty_like(data), np.empty_like(data)
                    results = {
                        "plain HTTP (binary)": timed(lambda: plain_http(client, data), args.repeats),
                        "shm pool (HTTP client)": timed(lambda: through_pool(client, pool, data), args.repeats),
                        "memcpy in + out (ceiling)": timed(lambda: memcpy(data, buffer, back), args.repeats),
                    }
                    baseline = statistics.median(results["plain HTTP (binary)"])
                    for name, times in results.items():
                        median = statistics.median(times)
                        rows.append(
                            f"| {size // MiB} MiB | {name} | {median * 1000:.2f} | {sorted(times)[int(len(times) * 0.9)] * 1000:.2f} "
                            f"| {size / median / 1e9:.2f} | {baseline / median:.1f}x |"
                        )
            client.close()
    print("| tensor | path | median ms | p90 ms | GB/s (input bytes / median) | vs plain HTTP |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
