"""What a python model costs in host memory, as the stubs' /proc shows it (triton_operator/memory/attribution.py),
and what one reading of /proc costs.

Python models whose model.py holds 0, 64, 128 and 256 MiB of touched numpy arrays (one CPU instance
each) and one of 0 MiB with 10 instances are loaded on a local tritonserver; each model's stubs are read
from /proc and attributed to it by their command lines, with the configs Triton reads back. Then the
reading of every stub (cmdline and smaps_rollup) is timed, and what Triton itself says about memory is
shown: `memory_usage` in the model statistics and the metrics' memory lines.

    .venv/bin/python bench/model_memory.py
"""

from __future__ import annotations

import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import tritonclient.grpc as grpcclient
from common import MiB, load, model_config, ports, print_table

from tests.support import models
from triton_operator.api.server import TritonServerSpec
from triton_operator.local.tritonserver import LocalTriton
from triton_operator.memory.attribution import model_memory, read_stubs

HOLDING = (
    "import numpy as np\n\nclass TritonPythonModel:\n"
    "    def initialize(self, args):\n        self.held = np.ones({mib} * (1 << 20), np.uint8)\n\n"
    "    def execute(self, requests):\n        return []\n"
)
HELD_MIB = (0, 64, 128, 256)
READINGS = 200


def holding_model(mib: int, instances: int = 1, name: str = ""):
    config = model_config(instanceGroup=[{"kind": "KIND_CPU", "count": instances}])
    return models.python_model(name or f"hold{mib}", config, HOLDING.format(mib=mib).encode())


def main() -> int:
    spec = TritonServerSpec.model_validate({"exitTimeoutSeconds": 5})
    with tempfile.TemporaryDirectory() as workdir, LocalTriton(spec, Path(workdir), ports()) as triton:
        load(triton, *(holding_model(mib) for mib in HELD_MIB), holding_model(0, 10, "ten"))
        client = grpcclient.InferenceServerClient(triton.grpc_url)
        names = [f"hold{mib}" for mib in HELD_MIB] + ["ten"]
        configs = {name: client.get_model_config(name).config for name in names}
        stubs = read_stubs()
        measured = model_memory(stubs, configs)
        rows = []
        for mib in HELD_MIB:
            found = measured[f"hold{mib}"]
            rows.append(
                [
                    mib,
                    found.instances,
                    f"{found.rss_bytes / MiB:.1f}",
                    f"{found.private_bytes / MiB:.1f}",
                    f"{(found.private_bytes - mib * MiB) / MiB:.1f}",
                ]
            )
        ten = measured["ten"]
        rows.append(
            [
                "0 (10 instances)",
                ten.instances,
                f"{ten.rss_bytes / MiB:.1f}",
                f"{ten.private_bytes / MiB:.1f}",
                f"{ten.private_bytes / ten.instances / MiB:.1f} each",
            ]
        )
        print_table(["held (MiB)", "stubs", "RSS (MiB)", "private (MiB)", "private less held (MiB)"], rows)

        ours = [stub.pid for stub in stubs if stub.cmdline[5] == str(triton.process.pid)]  # the stub's TRITON_PID
        start = time.perf_counter()
        for _ in range(READINGS):
            read_stubs(pids=ours)
        each = (time.perf_counter() - start) / READINGS
        print(f"\none reading of {len(ours)} stubs: {each * 1000:.2f} ms ({each / len(ours) * 1e6:.0f} us a stub)")
        start = time.perf_counter()
        for _ in range(20):
            found = read_stubs()
        print(
            f"one reading of all of this machine's /proc for stubs ({len(found)} found): "
            f"{(time.perf_counter() - start) / 20 * 1000:.1f} ms"
        )

        statistics = client.get_inference_statistics(as_json=True)
        print(
            "\nmemory_usage in the statistics:",
            {s["name"]: s.get("memory_usage", "absent") for s in statistics["model_stats"]},
        )
        time.sleep(3)  # past Triton's metrics interval (2 s), so its gauges have been filled once
        with urllib.request.urlopen(f"http://{triton.address}:{triton.ports.metrics}/metrics", timeout=30) as response:
            text = response.read().decode()
        print("metrics:", [line for line in text.splitlines() if "memory" in line and not line.startswith("#")])
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
