"""A client in Triton's pod (a sidecar) or on its host, sending tensors through system shared memory.

It opens the pool the TritonModel declares (`sharedMemory.clientPool` of examples/shm-scale.yaml:
4 regions of 8 MiB), which the operator has counted into the pod's /dev/shm, then runs requests
from several threads, each on a leased region.

Usage: python examples/clients/shm_client.py [GRPC_URL]
(default 127.0.0.1:8001, Triton's gRPC port, as local mode runs it)
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tritonclient.grpc as grpcclient

from triton_operator.client import SharedMemoryPool

MODEL = "shm_scale"
MiB = 1 << 20


def main(url: str) -> int:
    client = grpcclient.InferenceServerClient(url)

    def scale(seed: int) -> bool:
        image = np.random.default_rng(seed).random((3, 512, 512), dtype=np.float32)
        with pool.lease() as region:
            infer_input = grpcclient.InferInput("IMAGE", list(image.shape), "FP32")
            region.put(infer_input, image)
            output = grpcclient.InferRequestedOutput("SCALED")
            region.expect(output, image.nbytes)
            result = client.infer(MODEL, [infer_input], outputs=[output])
            return bool(np.allclose(region.read("SCALED", result), image * 2))

    with SharedMemoryPool(client, regions=4, region_bytes=8 * MiB, prefix="shm-scale-client") as pool:
        with ThreadPoolExecutor(8) as threads:
            results = list(threads.map(scale, range(16)))
    client.close()
    print(f"{MODEL}: {sum(results)}/{len(results)} requests through system shared memory were correct")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8001"))
