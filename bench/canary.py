"""Canary rollouts through the operator, on 3 real tritonserver pods: what a good one costs against
AllAtOnce, what its probe requests cost, and how soon a revision answering error responses is gone.

The operator runs in-process on the emulated API server (kmock) with three local tritonservers as the
pods of one TritonServer, serving the add model (python backend).

--part good (a client sending to each pod): each repeat edits the model's config (a new revision) and
measures, from the PATCH, every pod serving the new revision (read from each Triton's config of the
model) and the model's status saying so (Ready at the new revision; with Canary, its rollout Stable at
it). Canary runs with bakeSeconds 0 and minRequests 0: a good revision's whole cost is loading it on the
canary pod first, judging it, then reloading the other two.

--part probes (no client): each repeat edits the config and lets the canary bake `--bake` seconds with
the default probe bounds (maxRequests 20, requestsPerSecond 2), then again with maxRequests 0 (no
probes). It reads the probe requests the canary pod's Triton answered (its inference count of the new
revision at promotion: no client sent any) and this process's CPU time over the bake (the operator,
the emulated API server and the bench share it: the difference between the two runs is the probes').

--part rollback (a client sending to each pod): each repeat names a model.py that answers every request
with an error response (a new revision), and measures from the PATCH the status saying rolled back and
the canary pod back on the good revision; bakeSeconds 30, so a rollback comes from the probes, not
the bake's end.

--part first-load (no client): each repeat adds a new model (the add model's config and code, the
Canary strategy) and times its creation to Ready on the 3 pods, with its first loads probed
(onFirstLoad true, the default under Canary) and not.

    .venv/bin/python bench/canary.py [--part good|probes|rollback|first-load] [--repeats 5] [--poll 2] [--bake 15]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tritonclient.grpc as grpcclient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.models import ADD_CONFIG, ERROR_RESPONSE, add_code
from tests.support.operator import Cluster, Pods, api_server, running_operator
from tests.support.resources import FILES, MODEL, SERVER, python_model_documents
from tests.support.serving import RequestLoop, add_pod, revision_on
from triton_operator.local.tritonserver import LocalTriton
from triton_operator.protocol.names import GRPC_CONTROL_METADATA

PODS = ("triton-0", "triton-1", "triton-2")
STRATEGIES = {
    "AllAtOnce": {"strategy": "AllAtOnce"},
    "Canary (1 pod, bake 0)": {"strategy": "Canary", "pods": 1, "bakeSeconds": 0, "minRequests": 0},
}


def model_status(cluster: Cluster) -> dict[str, Any]:
    return (cluster.get("TritonModel", "add") or {}).get("status") or {}


def status_at(cluster: Cluster, revision: str, canary: bool) -> bool:
    status = model_status(cluster)
    ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
    rollout = status.get("rollout") or {}
    settled = not canary or (rollout.get("phase") == "Stable" and rollout.get("stableRevision") == revision)
    return (
        ready.get("status") == "True"
        and status.get("configHash") == revision
        and status.get("replicas") == "3/3"
        and settled
    )


async def all_serve(tritons: list[LocalTriton], revision: str) -> bool:
    return all([await asyncio.to_thread(revision_on, triton) == revision for triton in tritons])


@dataclass
class Fleet:
    cluster: Cluster
    tritons: dict[str, LocalTriton]
    revision: str  # what every pod serves

    @property
    def urls(self) -> list[str]:
        return [triton.grpc_url for triton in self.tritons.values()]

    @property
    def pods(self) -> list[LocalTriton]:
        return list(self.tritons.values())


@contextlib.asynccontextmanager
async def serving(rollout: dict[str, Any], poll: float) -> AsyncIterator[Fleet]:
    """The add model with this rollout, settled on 3 pods, under an operator polling rollouts every `poll` seconds."""
    server = copy.deepcopy(SERVER)
    server["spec"]["replicas"] = len(PODS)
    model = copy.deepcopy(MODEL)
    model["spec"]["rollout"] = rollout
    with tempfile.TemporaryDirectory(prefix="canary-bench-") as workdir:
        pods = Pods(Path(workdir))
        try:
            async with api_server() as cluster, running_operator(cluster, rollout_poll_seconds=poll):
                for obj in (server, FILES, model):
                    await cluster.create(copy.deepcopy(obj))
                key = await cluster.wait("the control key", lambda: cluster.control_key("triton"))
                for name in PODS:
                    await add_pod(cluster, pods, name, key)
                first = await cluster.wait(
                    "ready on 3 pods", lambda: (s := model_status(cluster)).get("replicas") == "3/3" and s, timeout=120
                )
                await cluster.wait(
                    "settled",
                    lambda: status_at(cluster, first["configHash"], rollout["strategy"] == "Canary"),
                    timeout=60,
                )
                yield Fleet(cluster, {name: pods.tritons[name] for name in PODS}, first["configHash"])
        finally:
            pods.stop_all()


async def new_revision(fleet: Fleet, repeat: int) -> str:
    """A config edit; the revision it makes."""
    cluster = fleet.cluster
    await cluster.patch(
        "TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": 100 + repeat + 1}}}}
    )
    return await cluster.wait(
        "the new revision in the status",
        lambda: (h := model_status(cluster).get("configHash")) != fleet.revision and h,
        timeout=60,
    )


async def measure_good(rollout: dict[str, Any], repeats: int, poll: float) -> tuple[list[float], list[float], int, int]:
    """Per repeat: seconds to every pod serving the new revision, and to the status saying so; requests sent and
    failed."""
    canary = rollout["strategy"] == "Canary"
    served, reported = [], []
    async with serving(rollout, poll) as fleet:
        cluster = fleet.cluster
        with RequestLoop(fleet.urls) as loop:
            for repeat in range(repeats):
                started = time.monotonic()
                new = await new_revision(fleet, repeat)
                await cluster.wait_async("every pod serving it", lambda: all_serve(fleet.pods, new), timeout=120)
                served.append(time.monotonic() - started)
                await cluster.wait("the status saying so", lambda: status_at(cluster, new, canary), timeout=120)
                reported.append(time.monotonic() - started)
                fleet.revision = new
        return served, reported, loop.sent, len(loop.failures)


def answered(triton: LocalTriton, revision: str) -> int:
    """Requests the pod's Triton answered for the add model, when it serves `revision` (Triton keeps no
    counts across a reload)."""
    assert revision_on(triton) == revision
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    try:
        [model] = client.get_inference_statistics(
            "add", headers={GRPC_CONTROL_METADATA: triton.control_key}
        ).model_stats
        return model.inference_stats.success.count + model.inference_stats.fail.count
    finally:
        client.close()


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Bake:
    seconds: float  # the edit to promotion
    probes: int  # requests the canary pod answered meanwhile
    cpu: float  # this process's CPU seconds meanwhile


async def measure_probes(max_requests: int, repeats: int, poll: float, bake: int) -> list[Bake]:
    rollout = {
        "strategy": "Canary",
        "pods": 1,
        "bakeSeconds": bake,
        "minRequests": 0,
        "probe": {"maxRequests": max_requests},
    }
    bakes = []
    async with serving(rollout, poll) as fleet:
        cluster = fleet.cluster
        for repeat in range(repeats):
            started, cpu = time.monotonic(), cpu_seconds()
            new = await new_revision(fleet, repeat)
            baking = await cluster.wait(
                "baking", lambda: (r := model_status(cluster).get("rollout") or {}).get("phase") == "Baking" and r
            )
            await cluster.wait("promoted", lambda: status_at(cluster, new, True), timeout=bake + 60)
            seconds, used = time.monotonic() - started, cpu_seconds() - cpu
            [canary] = baking["canaryPods"]
            bakes.append(Bake(seconds, await asyncio.to_thread(answered, fleet.tritons[canary], new), used))
            await cluster.wait_async("every pod serving it", lambda: all_serve(fleet.pods, new), timeout=120)
            fleet.revision = new
    return bakes


async def measure_rollback(repeats: int, poll: float) -> tuple[list[float], list[float], int, int, str]:
    """Per repeat: seconds from naming an error-response model.py to the status saying rolled back, and
    to the canary pod serving the good revision again; client requests sent and failed; the last message."""
    rollout = {"strategy": "Canary", "pods": 1, "bakeSeconds": 30, "minRequests": 20, "maxFailureRatio": 0.01}
    reported, restored, message = [], [], ""
    async with serving(rollout, poll) as fleet:
        cluster = fleet.cluster
        with RequestLoop(fleet.urls) as loop:
            for repeat in range(repeats):
                files = copy.deepcopy(FILES)
                files["metadata"]["name"] = f"add-broken-{repeat}"
                files["data"]["model.py"] = add_code(offset=repeat, execute=ERROR_RESPONSE).decode()
                await cluster.create(files)
                items = MODEL["spec"]["files"]["configMapRef"]["items"]
                started = time.monotonic()
                await cluster.patch(
                    "TritonModel",
                    "add",
                    {"spec": {"files": {"configMapRef": {"name": files["metadata"]["name"], "items": items}}}},
                )
                record = await cluster.wait(
                    "rolled back",
                    lambda: (
                        (r := model_status(cluster).get("rollout") or {}).get("phase") == "RolledBack"
                        and r.get("revision") != fleet.revision
                        and r
                    ),
                    timeout=90,
                )
                reported.append(time.monotonic() - started)
                [canary] = record["canaryPods"]
                await cluster.wait_async(
                    "the canary on the good revision",
                    lambda: all_serve([fleet.tritons[canary]], fleet.revision),
                    timeout=60,
                )
                restored.append(time.monotonic() - started)
                message = record["message"]
                await cluster.patch(
                    "TritonModel",
                    "add",
                    {"spec": {"files": {"configMapRef": {"name": FILES["metadata"]["name"], "items": items}}}},
                )
                await cluster.wait(
                    "back at the good spec", lambda: status_at(cluster, fleet.revision, True), timeout=60
                )
        return reported, restored, loop.sent, len(loop.failures), message


async def measure_first_load(on_first_load: bool, repeats: int, poll: float) -> list[float]:
    """Per repeat: seconds from creating a new model to its status Ready on the 3 pods."""
    took = []
    async with serving({"strategy": "Canary", "pods": 1, "bakeSeconds": 0, "minRequests": 0}, poll) as fleet:
        cluster = fleet.cluster
        for repeat in range(repeats):
            name = f"new-{repeat}"
            files, model = python_model_documents(name, ADD_CONFIG, add_code())
            model["spec"]["rollout"] = {"strategy": "Canary", "probe": {"onFirstLoad": on_first_load}}
            await cluster.create(files)
            started = time.monotonic()
            await cluster.create(model)
            await cluster.wait(
                f"{name} ready on 3 pods",
                lambda: (
                    (cluster.condition("TritonModel", name, "Ready") or {}).get("status") == "True"
                    and (cluster.get("TritonModel", name) or {})["status"].get("replicas") == "3/3"
                ),
                timeout=60,
            )
            took.append(time.monotonic() - started)
    return took


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s | {min(values):.2f}-{max(values):.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("good", "probes", "rollback", "first-load"), default="good")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--poll", type=float, default=2.0, help="the operator's rollout_poll_seconds")
    parser.add_argument("--bake", type=int, default=15, help="bakeSeconds of --part probes")
    args = parser.parse_args()
    print(f"rollout_poll_seconds {args.poll}, {args.repeats} repeats")
    if args.part == "good":
        print(
            "| strategy | every pod serving (median) | range | status says so (median) | range "
            "| requests sent / failed |"
        )
        print("| --- | --- | --- | --- | --- | --- |")
        for label, rollout in STRATEGIES.items():
            served, reported, sent, failed = asyncio.run(measure_good(rollout, args.repeats, args.poll))
            print(f"| {label} | {spread(served)} | {spread(reported)} | {sent} / {failed} |", flush=True)
    elif args.part == "probes":
        print(f"bakeSeconds {args.bake}")
        print(
            "| probe maxRequests | edit to promotion (median) | probes answered by the canary pod per bake "
            "| per second of bake | process CPU per bake (median) | range |"
        )
        print("| --- | --- | --- | --- | --- | --- |")
        for max_requests in (20, 0):
            bakes = asyncio.run(measure_probes(max_requests, args.repeats, args.poll, args.bake))
            probes = [bake.probes for bake in bakes]
            cpu = [bake.cpu for bake in bakes]
            print(
                f"| {max_requests} | {statistics.median(b.seconds for b in bakes):.2f} s | {probes} "
                f"| {statistics.median(probes) / args.bake:.2f} | {statistics.median(cpu):.2f} s "
                f"| {min(cpu):.2f}-{max(cpu):.2f} s |",
                flush=True,
            )
    elif args.part == "first-load":
        print("| first loads probed | creation to Ready on 3 pods (median) | range |")
        print("| --- | --- | --- |")
        for on_first_load in (True, False):
            took = asyncio.run(measure_first_load(on_first_load, args.repeats, args.poll))
            print(f"| {'yes' if on_first_load else 'no'} | {spread(took)} |", flush=True)
    else:
        reported, restored, sent, failed, message = asyncio.run(measure_rollback(args.repeats, args.poll))
        print(
            "| status says rolled back (median) | range | canary pod on the good revision (median) | range "
            "| client requests sent / failed |"
        )
        print("| --- | --- | --- | --- | --- |")
        print(f"| {spread(reported)} | {spread(restored)} | {sent} / {failed} |")
        print(f"last message: {message}")


if __name__ == "__main__":
    main()
