"""The cost of a good canary rollout against AllAtOnce, through the operator, on 3 real tritonserver pods.

The operator runs in-process on the emulated API server (kmock) with three local tritonservers as the
pods of one TritonServer, serving the add model (python backend) while a client sends to each pod. Each
repeat edits the model's config (a new revision) and measures, from the PATCH:
- every pod serving the new revision (read from each Triton's config of the model), and
- the model's status saying so (Ready at the new revision; with Canary, its rollout Stable at it).

Canary runs with bakeSeconds 0 and minRequests 0: a good revision's whole cost is loading it on the
canary pod first, judging it, then reloading the other two.

    .venv/bin/python bench/canary.py [--repeats 5] [--poll 2]
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

from tests.support.operator import Cluster, Pods, api_server, running_operator  # noqa: E402
from tests.support.resources import FILES, MODEL, SERVER  # noqa: E402
from tests.support.serving import RequestLoop, add_pod, revision_on  # noqa: E402

PODS = ("triton-0", "triton-1", "triton-2")
STRATEGIES = {
    "AllAtOnce": {"strategy": "AllAtOnce"},
    "Canary (1 pod, bake 0)": {"strategy": "Canary", "pods": 1, "bakeSeconds": 0, "minRequests": 0},
}


def status_at(cluster: Cluster, revision: str, canary: bool) -> bool:
    status = (cluster.get("TritonModel", "add") or {}).get("status") or {}
    ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
    rollout = status.get("rollout") or {}
    settled = not canary or (rollout.get("phase") == "Stable" and rollout.get("stableRevision") == revision)
    return ready.get("status") == "True" and status.get("configHash") == revision and status.get("replicas") == "3/3" and settled


async def all_serve(urls: list[str], revision: str) -> bool:
    return all([await asyncio.to_thread(revision_on, url) == revision for url in urls])


async def measure(rollout: dict[str, Any], repeats: int, poll: float) -> tuple[list[float], list[float], int, int]:
    """Per repeat: seconds to every pod serving the new revision, and to the status saying so; requests sent and failed."""
    server = copy.deepcopy(SERVER)
    server["spec"]["replicas"] = len(PODS)
    model = copy.deepcopy(MODEL)
    model["spec"]["rollout"] = rollout
    canary = rollout["strategy"] == "Canary"
    serving, reported = [], []
    with tempfile.TemporaryDirectory(prefix="canary-bench-") as workdir:
        pods = Pods(Path(workdir))
        try:
            async with api_server() as cluster, running_operator(cluster, rollout_poll_seconds=poll):
                for obj in (server, FILES, model):
                    await cluster.create(copy.deepcopy(obj))
                key = await cluster.wait("the control key", lambda: cluster.control_key("triton"))
                for name in PODS:
                    await add_pod(cluster, pods, name, key)
                urls = [pods.tritons[name].grpc_url for name in PODS]
                first = await cluster.wait("ready on 3 pods", lambda: (s := (cluster.get("TritonModel", "add") or {}).get("status") or {}).get("replicas") == "3/3" and s, timeout=120)
                revision = first["configHash"]
                await cluster.wait("settled", lambda: status_at(cluster, revision, canary), timeout=60)
                with RequestLoop(urls) as loop:
                    for repeat in range(repeats):
                        started = time.monotonic()
                        await cluster.patch("TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": 100 + repeat + 1}}}})
                        new = await cluster.wait("the new revision in the spec's status", lambda: (h := ((cluster.get("TritonModel", "add") or {}).get("status") or {}).get("configHash")) != revision and h, timeout=60)
                        await cluster.wait_async("every pod serving it", lambda: all_serve(urls, new), timeout=120)
                        serving.append(time.monotonic() - started)
                        await cluster.wait("the status saying so", lambda: status_at(cluster, new, canary), timeout=120)
                        reported.append(time.monotonic() - started)
                        revision = new
                return serving, reported, loop.sent, len(loop.failures)
        finally:
            pods.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--poll", type=float, default=2.0, help="the operator's rollout_poll_seconds")
    args = parser.parse_args()
    print(f"rollout_poll_seconds {args.poll}, {args.repeats} repeats")
    print("| strategy | every pod serving (median) | range | status says so (median) | range | requests sent / failed |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, rollout in STRATEGIES.items():
        serving, reported, sent, failed = asyncio.run(measure(rollout, args.repeats, args.poll))
        print(
            f"| {label} | {statistics.median(serving):.2f} s | {min(serving):.2f}-{max(serving):.2f} | "
            f"{statistics.median(reported):.2f} s | {min(reported):.2f}-{max(reported):.2f} | {sent} / {failed} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
