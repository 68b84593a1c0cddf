"""A client that sends its tensors to Triton through system shared memory (same host or same pod).

Usage: python examples/clients/shm_client.py [GRPC_URL]   (default 127.0.0.1:18001, local mode's port)
"""

from __future__ import annotations

import os
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm

MODEL = "shm_scale"


def main(url: str) -> int:
    client = grpcclient.InferenceServerClient(url)
    image = np.random.default_rng(0).random((3, 512, 512), dtype=np.float32)
    size = image.nbytes
    name = f"shm-client-{os.getpid()}"
    inputs_region = shm.create_shared_memory_region(f"{name}-in", f"/{name}-in", size)
    outputs_region = shm.create_shared_memory_region(f"{name}-out", f"/{name}-out", size)
    try:
        client.register_system_shared_memory(f"{name}-in", f"/{name}-in", size)
        client.register_system_shared_memory(f"{name}-out", f"/{name}-out", size)
        shm.set_shared_memory_region(inputs_region, [image])
        infer_input = grpcclient.InferInput("IMAGE", list(image.shape), "FP32")
        infer_input.set_shared_memory(f"{name}-in", size)
        output = grpcclient.InferRequestedOutput("SCALED")
        output.set_shared_memory(f"{name}-out", size)
        client.infer(MODEL, [infer_input], outputs=[output])
        scaled = shm.get_contents_as_numpy(outputs_region, np.float32, image.shape)
        assert np.allclose(scaled, image * 2), "the model should double its input"
        print(f"{MODEL}: {size} bytes in and out through system shared memory, result correct")
        return 0
    finally:
        for region in (f"{name}-in", f"{name}-out"):
            client.unregister_system_shared_memory(region)
        shm.destroy_shared_memory_region(inputs_region)
        shm.destroy_shared_memory_region(outputs_region)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:18001"))
