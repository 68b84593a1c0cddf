"""Scale-up: the time from a TritonServer scaled 1 -> 2 (through its scale subresource, as an HPA does)
to the new pod Ready with N models loaded, on the mini cluster (tests/support/minicluster: a
Deployment controller, a kubelet running real tritonservers, the operator in-process on the
emulated API server). N = 0 is a pod's start alone: Triton up and the readinessGate set with
nothing to load. Each repeat scales back to 1 first and waits for the extra pod to be gone.

The models are python-backend copies of one small model (each its own stub process), sharing one
files ConfigMap; the operator loads a new pod's models `TRITON_OPERATOR_PARALLEL_LOADS` (4) at once.

    .venv/bin/python bench/scale_up.py [--models 0,1,10,50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.minicluster import MiniCluster, operated_cluster  # noqa: E402
from tests.support.minicluster.controller import is_ready, is_terminating  # noqa: E402
from tests.support.resources import FILES, MODEL, SERVER  # noqa: E402

SCALE = "/apis/triton-operator.io/v1alpha1/namespaces/default/tritonservers/triton/scale"


def models(count: int) -> list[dict[str, Any]]:
    copies = []
    for index in range(count):
        model = copy.deepcopy(MODEL)
        model["metadata"]["name"] = f"add-{index}"
        model["spec"]["modelName"] = f"add_{index}"
        copies.append(model)
    return copies


def serving(mini: MiniCluster) -> list[dict[str, Any]]:
    return [pod for pod in mini.pods_of("triton") if is_ready(pod) and not is_terminating(pod)]


async def scale(mini: MiniCluster, replicas: int) -> None:
    await mini.cluster.request("PATCH", SCALE, {"spec": {"replicas": replicas}}, "application/merge-patch+json")


async def measure(count: int, repeats: int) -> list[float]:
    """Seconds from the scale-up to the new pod Ready, per repeat."""
    server = copy.deepcopy(SERVER)
    server["spec"].update(replicas=1, exitTimeoutSeconds=2, drain={"preStopSeconds": 0})
    seconds = []
    with tempfile.TemporaryDirectory(prefix="scale-up-") as workdir:
        async with operated_cluster(Path(workdir)) as mini:
            for obj in (server, FILES, *models(count)):
                await mini.cluster.create(copy.deepcopy(obj))
            await mini.cluster.wait("the first pod serving", lambda: len(serving(mini)) == 1 == len(mini.pods_of("triton")), timeout=600)
            for _ in range(repeats):
                before = {pod["metadata"]["name"] for pod in mini.pods_of("triton")}
                started = time.monotonic()
                await scale(mini, 2)
                await mini.cluster.wait("the new pod Ready", lambda: any(pod["metadata"]["name"] not in before for pod in serving(mini)), timeout=600)
                seconds.append(time.monotonic() - started)
                await scale(mini, 1)
                await mini.cluster.wait("back to one pod", lambda: len(mini.pods_of("triton")) == 1 == len(serving(mini)), timeout=600)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="0,1,10,50", help="model counts to measure, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| models | new pod Ready after scale-up (median) | range | over a pod's start alone |")
    print("| --- | --- | --- | --- |")
    alone: float | None = None
    for count in (int(part) for part in args.models.split(",")):
        seconds = asyncio.run(measure(count, args.repeats))
        median = statistics.median(seconds)
        alone = median if count == 0 else alone
        extra = f"+{median - alone:.2f} s" if alone is not None and count else "-"
        print(f"| {count} | {median:.2f} s | {min(seconds):.2f}-{max(seconds):.2f} s | {extra} |", flush=True)


if __name__ == "__main__":
    main()
