"""Client shared-memory pool vs plain HTTP (binary tensors), with memcpy as the ceiling.

Serves an identity python model (output = input) on a local tritonserver from the nvidia-pytriton
wheel and times full requests with the same HTTP client each way: tensors sent and received as
binary HTTP bodies, or put into and read from a leased system shared-memory region, or (--cuda, on a
GPU host: the server gets one GPU and the model a KIND_GPU instance) a CUDA shared-memory region.
memcpy times the same bytes copied in and out in this process, the least any transport can cost.

    .venv/bin/python bench/shm_pool.py [--repeats 30] [--sizes-kib 64,1024,16384] [--cuda]

Prints a Markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient
from common import load, ports, python_model

from triton_operator.api.server import TritonServerSpec
from triton_operator.client import CudaRegions, SharedMemoryPool
from triton_operator.local.tritonserver import LocalTriton


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
    parser.add_argument("--sizes-kib", default="64,1024,16384", help="tensor sizes in KiB, comma-separated")
    parser.add_argument("--cuda", action="store_true", help="add a CUDA shared-memory pool (needs a GPU)")
    args = parser.parse_args()
    sizes = [int(kib) * 1024 for kib in args.sizes_kib.split(",")]
    region_bytes = 2 * max(sizes) + 4096
    gpus = {"gpus": {"count": 1}} if args.cuda else {}
    instance = [{"kind": "KIND_GPU" if args.cuda else "KIND_CPU", "count": 1}]
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        spec = TritonServerSpec.model_validate(
            {"exitTimeoutSeconds": 5, "pythonBackend": {"shmDefaultBytes": "64Mi"}, **gpus}
        )
        with LocalTriton(spec, Path(workdir), ports()) as triton:
            load(triton, python_model("identity", "x", instanceGroup=instance))
            client = httpclient.InferenceServerClient(triton.http_url.removeprefix("http://"), network_timeout=120)
            pools = {
                "shm pool (HTTP client)": SharedMemoryPool(client, regions=2, region_bytes=region_bytes, prefix="bench")
            }
            if args.cuda:
                pools["CUDA shm pool (HTTP client)"] = SharedMemoryPool(
                    client, regions=2, region_bytes=region_bytes, prefix="benchcuda", kind=CudaRegions()
                )
            for pool in pools.values():
                pool.open()
            try:
                for size in sizes:
                    data = np.random.default_rng(0).random(size // 4, dtype=np.float32)
                    buffer, back = np.empty_like(data), np.empty_like(data)
                    results = {"plain HTTP (binary)": timed(lambda: plain_http(client, data), args.repeats)}
                    for name, pool in pools.items():
                        results[name] = timed(lambda: through_pool(client, pool, data), args.repeats)
                    results["memcpy in + out (ceiling)"] = timed(lambda: memcpy(data, buffer, back), args.repeats)
                    baseline = statistics.median(results["plain HTTP (binary)"])
                    for name, times in results.items():
                        median = statistics.median(times)
                        rows.append(
                            f"| {size // 1024} KiB | {name} | {median * 1000:.3f} "
                            f"| {sorted(times)[int(len(times) * 0.9)] * 1000:.3f} "
                            f"| {size / median / 1e9:.2f} | {baseline / median:.1f}x |"
                        )
            finally:
                for pool in pools.values():
                    pool.close()
            client.close()
    print("| tensor | path | median ms | p90 ms | GB/s (input bytes / median) | vs plain HTTP |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
