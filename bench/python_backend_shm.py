"""How big a python-backend stub's /dev/shm region grows for a request: the figure render/shm.py uses.

Two python models on a local tritonserver: `identity` (output as big as the input) and `first`
(a one-element output). After each request of 3 and 25 MiB, the stub regions (named by local
mode's shm prefix) are measured in /dev/shm.

    .venv/bin/python bench/python_backend_shm.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from common import MiB, load, ports, python_model

from triton_operator.api.server import TritonServerSpec
from triton_operator.local.tritonserver import LocalTriton
from triton_operator.render.shm import region_bytes


def main() -> int:
    spec = TritonServerSpec.model_validate({"exitTimeoutSeconds": 5})
    print("| model | request in + out (MiB) | region measured (MiB) | region by render/shm.py (MiB) |")
    print("| --- | --- | --- | --- |")
    for name, expression in (("identity", "x"), ("first", "x[:1]")):
        with tempfile.TemporaryDirectory() as workdir:
            with LocalTriton(spec, Path(workdir), ports()) as triton:
                load(triton, python_model(name, expression))
                client = grpcclient.InferenceServerClient(triton.grpc_url)
                for size in (3 * MiB, 25 * MiB):
                    data = np.ones(size // 4, np.float32)
                    infer_input = grpcclient.InferInput("IN", [data.size], "FP32")
                    infer_input.set_data_from_numpy(data)
                    result = client.infer(name, [infer_input])
                    [region] = triton.shm_regions()
                    execution = size + result.as_numpy("OUT").nbytes
                    print(
                        f"| {name} | {execution / MiB:.6g} | {region.stat().st_size / MiB:.0f} "
                        f"| {region_bytes(execution, spec) / MiB:.0f} |"
                    )
                client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
