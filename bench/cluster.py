"""The operator's benchmarks on a real control plane (tests/support/controlplane: kube-apiserver, etcd,
controller-manager and scheduler built from source, a node running pods as processes), each part on
a control plane of its own in a temporary directory, the operator as `triton-operator run -A` on this
machine with the cluster admin's kubeconfig (its CPU and RSS read from /proc). As the emulated
benches measure them (bench/operator_overhead.py, bench/scale_up.py), whose functions these reuse:

- edit: the add model on a TritonServer of 3 pods (real tritonservers the node runs, each at its pod
  IP); a config edit (the PATCH) -> the new revision serving on all 3 pods, against Triton's own reload
  of the same change on one and on three servers at once. Goal: at most 1.2x + 50 ms.
- fleet, per size (TritonModels on one TritonServer per 333, no node: their pods stay Pending, as the
  emulated fleet has none): the time to create them through the API server (`--concurrency` requests at
  once), from the operator's start to every model's status, its CPU per resync of every server once
  steady (goal under 100 ms per 1,000 models), its RSS (goal under 600 MB), and an edit -> the model's
  status saying so (goal under 2 s); beside it the API server's and etcd's own CPU over the same window
  of resyncs and their RSS.
- failover: two operators with leader election (the chart's default timings, 15/10/2 s) on the real
  Lease, no node; the leader SIGKILLed (the standby waits out the lease) or SIGTERMed (it releases the
  Lease as it stops) -> the standby holding the Lease, and its first pass of the server ended (its
  reconcile histogram), each seen by polling (20 ms; the emulated bench's figures are its API server's
  own record of the writes).
- scale: a TritonServer of one pod and N python models scaled 1 -> 2 through its scale subresource ->
  the new pod Ready (from the scale, and from its tritonserver's start as the node logged it), against
  Triton's own start-up load of them. Goal: at most 1.2x.

Needs root (the node's network namespaces) for edit and scale.

    .venv/bin/python bench/cluster.py --part edit|fleet|scale|failover [--repeats 3] [--sizes 1000 3000] [--models 50]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import re
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.failover import TIMINGS
from bench.operator_overhead import (
    MODELS_PER_SERVER,
    RESYNC_SECONDS,
    STATUSES_SECONDS,
    Api,
    _control_key,
    _hash_changed,
    _replicas,
    alive_and,
    cpu_seconds,
    create_fleet,
    edit_times,
    memory_mb,
    operator_process,
    resync_cpu,
    resync_window,
)
from bench.scale_up import one_pod_server, pods_apart, scale_ups, triton_own
from tests.support.controlplane import ControlPlane, control_plane
from tests.support.e2e import KUBECTL
from tests.support.election import LEASES
from tests.support.election import SERVER as ELECTION_SERVER
from tests.support.election import OperatorProcess as ElectedOperator
from tests.support.operator import Pods
from tests.support.resources import FILES, MODEL, SERVER

ROOT = Path(__file__).resolve().parents[1]
PLANE = ("kube-apiserver", "etcd")  # the components whose own cost is reported beside the operator's
# The node's log line for a pod's process started (logging's asctime: local time, milliseconds).
STARTED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ \S+: pod (\S+): started ")


@contextlib.asynccontextmanager
async def cluster(nodes: int) -> AsyncIterator[tuple[ControlPlane, Api]]:
    """A control plane of its own with the CRDs applied, and a client of it as the cluster admin."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-cluster-") as workdir,
        control_plane(Path(workdir) / "plane", nodes=nodes) as plane,
    ):
        kubectl = [KUBECTL, "--kubeconfig", str(plane.kubeconfig)]
        subprocess.run(
            [*kubectl, "apply", "--server-side", "-f", str(ROOT / "crds")], check=True, capture_output=True, timeout=120
        )
        subprocess.run(
            [*kubectl, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        tls = ssl.create_default_context(cafile=str(plane.ca))
        tls.load_cert_chain(str(plane.admin.certificate), str(plane.admin.key))
        api = Api(plane.server, "", tls)
        try:
            yield plane, api
        finally:
            await api.session.close()


def load_average() -> str:
    return "/".join(f"{load:.1f}" for load in os.getloadavg())


# edit


async def pod_urls(api: Api) -> list[str]:
    """The gRPC address of each of the server's pods, at its pod IP."""
    urls = []
    for pod in await pods_apart(api):
        [container] = pod["spec"]["containers"]
        [port] = [p["containerPort"] for p in container["ports"] if p["name"] == "grpc"]
        urls.append(f"{pod['status']['podIP']}:{port}")
    return urls


async def rolled_out(api: Api, replicas: int) -> bool:
    """The server's Deployment rolled out to `replicas` pods, every one Ready and no other left."""
    deployment = await api.get("Deployment", "triton") or {"metadata": {}}
    status = deployment.get("status") or {}
    counts = [status.get(field) for field in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas")]
    current = status.get("observedGeneration") == deployment["metadata"].get("generation")
    return current and counts == [replicas] * 4 and len(await pods_apart(api)) == replicas


async def config_edits(repeats: int) -> dict[str, list[float]]:
    """bench/operator_overhead.py's config_edits, the 3 pods the node's."""
    times: dict[str, list[float]] = {"operator": [], "raw one": [], "raw three": []}
    async with cluster(nodes=1) as (plane, api), operator_process(api, 60, plane.kubeconfig):
        for obj in (SERVER | {"spec": {**SERVER["spec"], "replicas": 3}}, FILES, MODEL):
            await api.create(obj)
        key = await api.wait("the control key", lambda: _control_key(api, "triton"))
        # The first Deployment is rendered before the model is known: a later render rolls the pods.
        await api.wait("3 pods of the latest template, Ready", lambda: rolled_out(api, 3), timeout=600, every=0.5)
        await api.wait("ready on 3 pods", lambda: _replicas(api, "add", "3/3"), timeout=600, every=0.5)
        urls = await pod_urls(api)
        assert len(urls) == 3, urls
        with tempfile.TemporaryDirectory(prefix="bench-references-") as workdir:
            pods = Pods(Path(workdir))
            try:
                references = [pods.start(f"reference-{i}", key).grpc_url for i in range(3)]
                await edit_times(api, urls, references, key, repeats, times)
            finally:
                leftovers = pods.stop_all()
                assert not leftovers, f"/dev/shm regions left behind: {leftovers}"
    return times


def edit_part(repeats: int) -> None:
    times = asyncio.run(config_edits(repeats))
    op, one, three = (times[name] for name in ("operator", "raw one", "raw three"))
    print("| measure | median (min-max) | ratio of the median | goal |")
    print("| --- | --- | --- | --- |")
    print(f"| config edit -> new revision on 3 pods, through the operator | {_ms(op)} | | |")
    for label, raw in (("one server", one), ("3 servers at once", three)):
        verdict = "met" if statistics.median(op) <= 1.2 * statistics.median(raw) + 0.05 else "missed"
        print(
            f"| Triton's own reload of the same change, {label} | {_ms(raw)} "
            f"| {statistics.median(op) / statistics.median(raw):.2f}x | <= 1.2x + 50 ms: {verdict} |"
        )
    print("repeats (ms): " + "; ".join(f"{name} {[round(t * 1000) for t in values]}" for name, values in times.items()))


def _ms(seconds: list[float]) -> str:
    return f"{statistics.median(seconds) * 1000:.0f} ms ({min(seconds) * 1000:.0f}-{max(seconds) * 1000:.0f})"


# fleet


def plane_cpu(plane: ControlPlane) -> dict[str, float]:
    return {name: cpu_seconds(plane.processes[name].pid) for name in PLANE}


async def statuses_written(api: Api, models: int) -> bool:
    """Every model's status written (one list of them all: the API server's cost of it is before any
    window measured)."""
    listed = await api.request("GET", "/apis/triton-operator.io/v1alpha1/namespaces/default/tritonmodels")
    return sum(bool((item.get("status") or {}).get("configHash")) for item in listed["items"]) >= models


async def edits_to_status(api: Api, servers: int, repeats: int) -> list[float]:
    """Per edit of a model (on a server of its own where there are enough), a second apart: the PATCH sent ->
    the model's status at the new config hash."""
    seconds = []
    for attempt in range(repeats):
        name = f"model-{attempt}"
        old = (await api.status_of(name))["configHash"]
        edited = {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": 300 + attempt}}}}
        sent = time.perf_counter()
        await api.patch("TritonModel", name, edited)
        await api.wait("the edit's status", lambda: _hash_changed(api, name, old), timeout=60, every=0.02)
        seconds.append(time.perf_counter() - sent)
        await asyncio.sleep(1)
    return seconds


async def fleet(models: int, repeats: int, concurrency: int) -> dict[str, Any]:
    servers = max(1, models // MODELS_PER_SERVER)
    figures: dict[str, Any] = {"models": models, "servers": servers, "load_before": load_average()}
    async with cluster(nodes=0) as (plane, api):
        started = time.perf_counter()
        await create_fleet(api, models, servers, concurrency)
        figures["create"] = time.perf_counter() - started
        figures["create_cpu"] = plane_cpu(plane)
        async with operator_process(api, RESYNC_SECONDS, plane.kubeconfig) as operator:
            started = time.perf_counter()
            await api.wait(
                "every status written", lambda: alive_and(operator, statuses_written(api, models)), STATUSES_SECONDS, 5
            )
            figures["first"] = time.perf_counter() - started
            figures["resync_cpu"], figures["passes"], figures["resync_windows"] = await resync_cpu(
                operator, servers, passes=3, resync_seconds=RESYNC_SECONDS
            )
            # One more steady window, with the API server's and etcd's CPU over it.
            before = plane_cpu(plane)
            figures["last_window"], made = await resync_window(operator, servers, 3, RESYNC_SECONDS)
            after = plane_cpu(plane)
            figures["plane_cpu"] = {name: (after[name] - before[name]) / (made / servers) for name in PLANE}
            figures["rss"], figures["peak"] = memory_mb(operator.process.pid)
            figures["plane_rss"] = {name: memory_mb(plane.processes[name].pid) for name in PLANE}
            figures["edit"] = await edits_to_status(api, servers, repeats)
            figures["rss_end"], figures["peak_end"] = memory_mb(operator.process.pid)
            operator.alive()
            figures["warnings"] = [line for line in operator.log.read_text().splitlines() if " WARNING " in line][:5]
    figures["load_after"] = load_average()
    return figures


def fleet_part(sizes: list[int], repeats: int, concurrency: int) -> None:
    results = []
    for size in sizes:
        figures = asyncio.run(fleet(size, repeats, concurrency))
        results.append(figures)
        print(json.dumps(figures), flush=True)
    print(
        "| TritonModels (servers) | created through the API server | start to every status "
        "| operator CPU per resync of all servers (per 1,000 models) | operator RSS (peak) "
        "| edit -> its status, median (max) | API server CPU per resync, RSS | etcd CPU per resync, RSS |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for f in results:
        plane = [
            f"{f['plane_cpu'][name] * 1000:.0f} ms, {f['plane_rss'][name][0]:.0f} MB ({f['plane_rss'][name][1]:.0f})"
            for name in PLANE
        ]
        print(
            f"| {f['models']} ({f['servers']}) | {f['create']:.0f} s | {f['first']:.0f} s "
            f"| {f['resync_cpu'] * 1000:.0f} ms ({f['resync_cpu'] * 1000 / (f['models'] / 1000):.0f} ms) "
            f"| {f['rss']:.0f} MB ({f['peak']:.0f} MB) "
            f"| {statistics.median(f['edit']) * 1000:.0f} ms ({max(f['edit']) * 1000:.0f} ms) | {' | '.join(plane)} |"
        )


# scale


def node_started(plane: ControlPlane, pod: str) -> float:
    """When the node started the pod's process (its log), as time.monotonic()."""
    log = (plane.logs / f"{plane.node_names[0]}.log").read_text(errors="replace")
    [at] = [match[1] for line in log.splitlines() if (match := STARTED.match(line)) and match[2] == pod]
    wall = datetime.datetime.strptime(at, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return wall - time.time() + time.monotonic()


async def scale_up(count: int, repeats: int) -> tuple[list[float], list[float]]:
    async with cluster(nodes=1) as (plane, api), operator_process(api, 60, plane.kubeconfig):

        async def started_at(pod: str) -> float:
            return node_started(plane, pod)

        server = one_pod_server()
        return await scale_ups(api, count, repeats, started_at, server)


def scale_part(count: int, repeats: int) -> None:
    own = triton_own(count, repeats)
    pod, from_start = asyncio.run(scale_up(count, repeats))
    ratio = statistics.median(from_start) / statistics.median(own)
    print(
        "| models | Triton's own start-up load | new pod Ready after scale-up | from the pod's tritonserver start "
        "| ratio |"
    )
    print("| --- | --- | --- | --- | --- |")
    print(f"| {count} | {_s(own)} | {_s(pod)} | {_s(from_start)} | {ratio:.2f}x; goal <= 1.2x |")
    print(f"repeats (s): own {_list(own)}; from the scale {_list(pod)}; from the start {_list(from_start)}")


def _s(seconds: list[float]) -> str:
    return f"{statistics.median(seconds):.2f} s ({min(seconds):.2f}-{max(seconds):.2f})"


def _list(seconds: list[float]) -> list[float]:
    return [round(s, 2) for s in seconds]


# failover


def passes(operator: ElectedOperator) -> float:
    """The passes an operator has made (its reconcile histogram's count); none while it does not answer."""
    try:
        text = operator.scrape("/metrics")
    except OSError:
        return 0
    counts = [
        line.split()[1] for line in text.splitlines() if line.startswith("triton_operator_reconcile_seconds_count")
    ]
    return sum(float(count) for count in counts)


async def holder(api: Api) -> str:
    lease = await api.request("GET", LEASES.format(ns="default") + "/triton-operator")
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


async def failover(plane: ControlPlane, api: Api, workdir: Path, run: int, stop: signal.Signals) -> tuple[float, float]:
    """One repeat: (signal -> the standby holds the Lease, signal -> its first pass ended), in seconds."""
    settings = {**TIMINGS["default"], "log_level": "WARNING"}
    a = ElectedOperator(workdir, plane.server, f"a{run}", plane.kubeconfig, **settings).start()
    b = ElectedOperator(workdir, plane.server, f"b{run}", plane.kubeconfig, **settings)
    try:

        async def a_leads() -> bool:
            return (await holder(api)).startswith(f"{a.name}_") and passes(a) > 0

        async def b_stands_by() -> bool:
            return b.leader_gauge() == 0

        async def seen(what: str, check: Any) -> float:
            await api.wait(what, check, timeout=120, every=0.02)
            return time.monotonic()

        async def b_holds() -> bool:
            return (await holder(api)).startswith(f"{b.name}_")

        async def b_passed() -> bool:
            return passes(b) > 0

        await api.wait("a leading, its first pass ended", a_leads, timeout=120, every=0.2)
        b.start()
        await api.wait("b standing by", b_stands_by, timeout=120, every=0.2)
        await asyncio.sleep(1)  # b has read the Lease at least once more
        a.signal(stop)
        stopped = time.monotonic()
        took, first = await asyncio.gather(seen("b holding the Lease", b_holds), seen("b's first pass", b_passed))
        assert await a.exited(60) in (0, -signal.SIGKILL), a.log()
        return took - stopped, first - stopped
    finally:
        b.signal(signal.SIGTERM)  # releases the Lease: the next repeat's leader takes it at once
        await b.exited(60)
        a.stop()


async def failovers(repeats: int) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as workdir:
        async with cluster(nodes=0) as (plane, api):
            await api.create(ELECTION_SERVER)
            for stop in (signal.SIGKILL, signal.SIGTERM):
                results[stop.name] = [
                    await failover(plane, api, Path(workdir), len(results) * repeats + run, stop)
                    for run in range(repeats)
                ]
    return results


def failover_part(repeats: int) -> None:
    results = asyncio.run(failovers(repeats))
    timings = "/".join(f"{value:g}" for value in TIMINGS["default"].values())
    print("| timings (lease/renew/retry s) | leader stopped by | Lease taken over | first pass ended |")
    print("| --- | --- | --- | --- |")
    for stop, runs in results.items():
        took, first = [run[0] for run in runs], [run[1] for run in runs]
        print(f"| default ({timings}) | {stop} | {_s(took)} | {_s(first)} |")
    print("repeats (s): " + "; ".join(f"{stop} {[_list(list(run)) for run in runs]}" for stop, runs in results.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["edit", "fleet", "scale", "failover"], required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000], help="fleet: TritonModels, one run each")
    parser.add_argument("--concurrency", type=int, default=32, help="fleet: create requests at once")
    parser.add_argument("--models", type=int, default=50, help="scale: python models on the server")
    args = parser.parse_args()
    print(f"load average before: {load_average()}", flush=True)
    started = time.monotonic()
    if args.part == "edit":
        edit_part(args.repeats)
    elif args.part == "fleet":
        fleet_part(args.sizes, args.repeats, args.concurrency)
    elif args.part == "scale":
        scale_part(args.models, args.repeats)
    else:
        failover_part(args.repeats)
    print(f"load average after: {load_average()}; {time.monotonic() - started:.0f} s in all", flush=True)


if __name__ == "__main__":
    main()
