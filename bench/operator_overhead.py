"""The operator's own cost, measured through it on the emulated API server (kmock).

1. Config edit -> the new revision serving on all 3 local Triton "pods", against Triton's own
   reload of the same change on one server (load call until the new config answers).
   Goal: at most 1.2x + 50 ms.
2. 1,000 TritonModels on 3 servers (no pods): the operator's RSS with the API server in another
   process (goal: under 200 MB), and the time of one pass of each unchanged server (the resync).

    .venv/bin/python bench/operator_overhead.py [--repeats 5] [--models 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tritonclient.grpc as grpcclient  # noqa: E402

from tests.support.models import python_model  # noqa: E402
from tests.support.operator import Cluster, Pods, api_server, running_operator  # noqa: E402
from tests.test_operator import FILES, MODEL, SERVER  # noqa: E402
from tests.test_sync_triton import ADD_CONFIG, add_code  # noqa: E402
from triton_operator.triton.protocol import GRPC_CONTROL_METADATA, REVISION_PARAMETER  # noqa: E402


def revision(url: str, name: str = "add") -> str:
    client = grpcclient.InferenceServerClient(url)
    try:
        return client.get_model_config(name).config.parameters[REVISION_PARAMETER].string_value
    except Exception:
        return ""
    finally:
        client.close()


async def until_all_serve(urls: list[str], old: str) -> None:
    pending = set(urls)
    while pending:
        pending = {url for url in pending if revision(url) in ("", old)}
        await asyncio.sleep(0.002)


async def config_edits(repeats: int) -> tuple[list[float], list[float]]:
    through_operator, raw = [], []
    with tempfile.TemporaryDirectory() as workdir:
        pods = Pods(Path(workdir))
        try:
            async with api_server() as cluster, running_operator(cluster, resync_seconds=60):
                for obj in (SERVER | {"spec": {**SERVER["spec"], "replicas": 3}}, FILES, MODEL):
                    await cluster.create(copy.deepcopy(obj))
                key = await cluster.wait("the control key", lambda: cluster.control_key("triton"))
                tritons = [pods.start(f"pod-{i}", key) for i in range(3)]
                for i, triton in enumerate(tritons):
                    await cluster.add_pod("triton", f"pod-{i}", triton.address, triton.ports.grpc)
                urls = [t.grpc_url for t in tritons]
                await cluster.wait("ready", lambda: (cluster.get("TritonModel", "add") or {}).get("status", {}).get("replicas") == "3/3")
                reference = pods.start("reference", key)
                for attempt in range(repeats):
                    delay = 100 + attempt + 1
                    old = revision(urls[0])
                    started = time.perf_counter()
                    await cluster.patch("TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": delay}}}})
                    await until_all_serve(urls, old)
                    through_operator.append(time.perf_counter() - started)
                    raw.append(raw_reload(reference.grpc_url, key, delay))
        finally:
            pods.stop_all()
    return through_operator, raw


def raw_reload(url: str, key: str, delay: int) -> float:
    """Triton's own reload of the same change on one server: the load call until the new config answers."""
    before, after = (python_model("add", {**ADD_CONFIG, "dynamicBatching": {"maxQueueDelayMicroseconds": d}}, add_code()) for d in (delay, delay + 1000))
    client = grpcclient.InferenceServerClient(url)
    headers = {GRPC_CONTROL_METADATA: key}
    try:
        client.load_model("add", headers=headers, config=before.config_json, files={f"file:{p}": c for p, c in before.files.items()})
        started = time.perf_counter()
        client.load_model("add", headers=headers, config=after.config_json, files={f"file:{p}": c for p, c in after.files.items()})
        while revision(url) != after.revision:
            time.sleep(0.002)
        return time.perf_counter() - started
    finally:
        client.close()


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def fleet(models: int) -> tuple[float, float, list[float]]:
    server = subprocess.Popen([sys.executable, __file__, "--serve-api"], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()  # type: ignore[union-attr]
        cluster = Cluster(None, url)  # type: ignore[arg-type]
        for index in range(3):
            await cluster.create(copy.deepcopy(SERVER) | {"metadata": {"name": f"triton-{index}"}})
        await cluster.create(copy.deepcopy(FILES))
        for index in range(models):
            model = copy.deepcopy(MODEL)
            model["metadata"]["name"] = f"model-{index}"
            model["spec"]["serverRef"]["name"] = f"triton-{index % 3}"
            model["spec"]["config"]["maxBatchSize"] = 1 + index % 16
            await cluster.create(model)
        before = rss_mb()
        async with running_operator(cluster, resync_seconds=3600) as operator:
            keys = [("default", f"triton-{index}") for index in range(3)]
            started = time.perf_counter()
            await wait_for(lambda: all(key in operator.workers.running for key in keys))
            for key in keys:
                await operator.workers.get(key).next_pass()
            settled = time.perf_counter() - started
            passes = []
            for key in keys:
                began = time.perf_counter()
                await operator.workers.get(key).next_pass()
                passes.append(time.perf_counter() - began)
            return before, rss_mb(), passes + [settled]
    finally:
        server.send_signal(signal.SIGINT)
        server.wait()


async def wait_for(check) -> None:  # type: ignore[no-untyped-def]
    while not check():
        await asyncio.sleep(0.01)


async def serve_api() -> None:
    async with api_server(request_history=256) as cluster:
        print(cluster.url, flush=True)
        await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--part", choices=["all", "reload", "fleet"], default="all", help="run one half only")
    parser.add_argument("--serve-api", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_api:
        asyncio.run(serve_api())
        return
    print("| measure | median | goal |")
    print("| --- | --- | --- |")
    if args.part in ("all", "reload"):
        reload_part(args.repeats)
    if args.part in ("all", "fleet"):
        fleet_part(args.models)
    print(f"pid {os.getpid()}")


def reload_part(repeats: int) -> None:
    operator_times, raw_times = asyncio.run(config_edits(repeats))
    op, raw = statistics.median(operator_times), statistics.median(raw_times)
    print(f"| config edit -> new revision on 3 pods, through the operator | {op * 1000:.0f} ms | <= {1.2 * raw * 1000 + 50:.0f} ms |")
    print(f"| Triton's own reload of the same change, one server | {raw * 1000:.0f} ms | |")
    print(f"| ratio | {op / raw:.2f}x | <= 1.2x + 50 ms: {'met' if op <= 1.2 * raw + 0.05 else 'missed'} |")
    print(f"repeats: operator {[round(t * 1000) for t in operator_times]} ms, raw {[round(t * 1000) for t in raw_times]} ms")


def fleet_part(models: int) -> None:
    before, after, passes = asyncio.run(fleet(models))
    print(f"| operator RSS holding {models} TritonModels on 3 servers | {after:.0f} MB (before the operator: {before:.0f} MB; peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB) | < 200 MB |")
    print(f"| first passes of the 3 servers (render, validate, apply, statuses) | {passes[-1]:.2f} s | |")
    print(f"| one resync pass of an unchanged server ({models // 3} models), median | {statistics.median(passes[:-1]) * 1000:.0f} ms | |")


if __name__ == "__main__":
    main()
