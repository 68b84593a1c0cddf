"""Scale-up: the time from a TritonServer scaled 1 -> 2 (through its scale subresource, as an HPA does)
to the new pod Ready with N models loaded, on the mini cluster (tests/support/minicluster: a
Deployment controller, a kubelet running real tritonservers, the operator in-process on the
emulated API server). N = 0 is a pod's start alone: Triton up and the readinessGate set with
nothing to load. Each repeat starts from a settled server, as an autoscaler finds one: one pod
serving and every model's status written (Ready, 1/1); it then scales back to 1. The new pod is timed
twice: from the scale-up (what an autoscaler waits, the emulated Deployment controller and kubelet
included) and from its tritonserver's start (the kubelet's log), beside Triton's own start-up load.

The models are python-backend copies of one small model (each its own stub process), sharing one
files ConfigMap; the operator loads a new pod's models `TRITON_OPERATOR_PARALLEL_LOADS` (4) at once.

Beside it, the same models loaded by Triton itself at its start-up: a tritonserver of the same spec
with their folders (the configs and files the operator sends) in its repository and `--load-model=*`,
timed from its start to every model READY, the least a new pod could take. And the operator's sync
alone, without the cluster: a tritonserver of the same spec started empty, then one Replica.sync
loading the models `--parallel` at once, timed from the start to every model loaded.

    .venv/bin/python bench/scale_up.py [--models 0,1,10,50] [--repeats 3] [--parallel 4,16]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp.web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.operator_overhead import Api, announced, operator_process, serve_beside, stop
from tests.support.minicluster import MiniCluster, mini_cluster, operated_cluster
from tests.support.minicluster.controller import is_ready, is_terminating
from tests.support.ports import free_ports
from tests.support.resources import FILES, MODEL, SERVER
from triton_operator.api.parse import parse_resources
from triton_operator.local.tritonserver import LocalTriton, Ports
from triton_operator.render.fleet import RenderedServer, plan_fleet
from triton_operator.triton.client import ControlClient
from triton_operator.triton.sync import Replica

SCALE = "/apis/triton-operator.io/v1alpha1/namespaces/default/tritonservers/triton/scale"
# The emulated API server keeps only its latest requests: it matches each new one against all it kept,
# which took 0.6 of a core during a join (sampled), on the cores the new pod's loads run on.
REQUEST_HISTORY = 16


def models(count: int) -> list[dict[str, Any]]:
    copies = []
    for index in range(count):
        model = copy.deepcopy(MODEL)
        model["metadata"]["name"] = f"add-{index}"
        model["spec"]["modelName"] = f"add_{index}"
        copies.append(model)
    return copies


def in_service(pod: dict[str, Any]) -> bool:
    return is_ready(pod) and not is_terminating(pod)


def serving(mini: MiniCluster) -> list[dict[str, Any]]:
    return [pod for pod in mini.pods_of("triton") if in_service(pod)]


def all_settled(statuses: list[dict[str, Any]]) -> bool:
    """Every model's status says it serves on the one pod (Ready, 1/1)."""
    return all(
        status.get("replicas") == "1/1"
        and any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
        for status in statuses
    )


def one_pod_server() -> dict[str, Any]:
    """The server scaled: one pod, which ends within 2 s when scaled away."""
    server = copy.deepcopy(SERVER)
    server["spec"].update(replicas=1, exitTimeoutSeconds=2, drain={"preStopSeconds": 0})
    return server


def settled(mini: MiniCluster, count: int) -> bool:
    """One pod serving and every model's status saying so (Ready, 1/1): the operator is done with the last
    change, as for a server an autoscaler scales after it served a while."""
    if not (len(serving(mini)) == 1 == len(mini.pods_of("triton"))):
        return False
    return all_settled(
        [(mini.cluster.get("TritonModel", f"add-{index}") or {}).get("status") or {} for index in range(count)]
    )


async def scale(mini: MiniCluster, replicas: int) -> None:
    await mini.cluster.request("PATCH", SCALE, {"spec": {"replicas": replicas}}, "application/merge-patch+json")


async def measure(count: int, repeats: int) -> tuple[list[float], list[float]]:
    """Seconds from the scale-up to the new pod Ready, and from its tritonserver's start (as the kubelet
    logged it) to Ready, per repeat."""
    server = one_pod_server()
    seconds, from_start = [], []
    with tempfile.TemporaryDirectory(prefix="scale-up-") as workdir:
        async with operated_cluster(Path(workdir), request_history=REQUEST_HISTORY) as mini:
            for obj in (server, FILES, *models(count)):
                await mini.cluster.create(copy.deepcopy(obj))
            for _ in range(repeats):
                await mini.cluster.wait(
                    "one pod serving, every status written", lambda: settled(mini, count), timeout=600
                )
                before = {pod["metadata"]["name"] for pod in mini.pods_of("triton")}
                started = time.monotonic()
                await scale(mini, 2)
                [new] = await mini.cluster.wait(
                    "the new pod Ready",
                    lambda: [pod["metadata"]["name"] for pod in serving(mini) if pod["metadata"]["name"] not in before],
                    timeout=600,
                )
                ready = time.monotonic()
                [run] = [event.at for event in mini.kubelet.pod_log(new) if event.what == "started"]
                seconds.append(ready - started)
                from_start.append(ready - run)
                await scale(mini, 1)
    return seconds, from_start


async def measure_apart(count: int, repeats: int) -> tuple[list[float], list[float]]:
    """measure()'s scale-ups with the operator (`triton-operator run -A`) in a process of its own and the
    mini cluster (the emulated API server, its controller and kubelet) in another, as on a cluster."""
    with tempfile.TemporaryDirectory(prefix="scale-up-apart-") as workdir:
        async with cluster_process(Path(workdir)) as (api, started_url), operator_process(api, resync_seconds=60):

            async def started_at(pod: str) -> float:
                async with api.session.get(started_url) as response:
                    return float((await response.json())[pod])

            return await scale_ups(api, count, repeats, started_at)


async def scale_ups(
    api: Api,
    count: int,
    repeats: int,
    started_at: Callable[[str], Awaitable[float]],
    server: dict[str, Any] | None = None,
) -> tuple[list[float], list[float]]:
    """measure()'s scale-ups through `api`, an operator already running, of `server` (default one_pod_server()):
    `started_at` says when a pod's tritonserver started (time.monotonic())."""
    for obj in (server or one_pod_server(), FILES, *models(count)):
        await api.create(copy.deepcopy(obj))
    seconds, from_start = [], []
    for _ in range(repeats):
        await api.wait("one pod serving, every status written", lambda: settled_apart(api, count), every=0.2)
        before = {pod["metadata"]["name"] for pod in await pods_apart(api)}
        started = time.monotonic()
        await api.patch("TritonServer", "triton", {"spec": {"replicas": 2}}, subresource="scale")
        [new] = await api.wait("the new pod Ready", lambda: new_ready_apart(api, before))
        ready = time.monotonic()
        seconds.append(ready - started)
        from_start.append(ready - await started_at(new))
        await api.patch("TritonServer", "triton", {"spec": {"replicas": 1}}, subresource="scale")
    return seconds, from_start


async def pods_apart(api: Api) -> list[dict[str, Any]]:
    listed = await api.request("GET", "/api/v1/namespaces/default/pods?labelSelector=app.kubernetes.io/instance=triton")
    return list(listed["items"])


async def new_ready_apart(api: Api, before: set[str]) -> list[str]:
    return [
        pod["metadata"]["name"]
        for pod in await pods_apart(api)
        if pod["metadata"]["name"] not in before and in_service(pod)
    ]


async def settled_apart(api: Api, count: int) -> bool:
    pods = await pods_apart(api)
    if not (len(pods) == 1 and in_service(pods[0])):
        return False
    listed = await api.request("GET", "/apis/triton-operator.io/v1alpha1/namespaces/default/tritonmodels")
    statuses = [item.get("status") or {} for item in listed["items"]]
    return len(statuses) == count and all_settled(statuses)


@contextlib.asynccontextmanager
async def cluster_process(workdir: Path) -> AsyncIterator[tuple[Api, str]]:
    """The mini cluster in a process of its own: its API and the URL of its pods' start times."""
    command = [sys.executable, __file__, "--serve-cluster", str(workdir)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        url, started_url = announced(process, "the mini cluster")
        api = Api(url, "")
        try:
            yield api, started_url
        finally:
            await api.session.close()
    finally:
        stop(process, timeout=120)  # SIGINT: the kubelet stops its pods' processes


async def serve_cluster(workdir: Path) -> None:
    """The mini cluster, and each pod's tritonserver start (time.monotonic(), the kubelet's log) as JSON."""
    async with mini_cluster(workdir, request_history=REQUEST_HISTORY) as mini:

        async def started(_: aiohttp.web.Request) -> aiohttp.web.Response:
            return aiohttp.web.json_response(
                {event.pod: event.at for event in mini.kubelet.events if event.what == "started"}
            )

        await serve_beside(mini.cluster.url, "/started", started)


class StartupTriton(LocalTriton):
    """A tritonserver that loads every model of its repository at its start, as Triton does alone."""

    def args(self) -> list[str]:
        return [*super().args(), "--load-model=*"]


def rendered_server(count: int) -> RenderedServer:
    servers, parsed, found = parse_resources([SERVER, *models(count)])
    assert found == [], found
    [rendered] = plan_fleet(servers, parsed, {("default", FILES["metadata"]["name"]): FILES}).servers
    return rendered


def write_repository(count: int, repository: Path) -> list[str]:
    """The models' folders as the operator renders them (config.pbtxt with its revision, model.py); their names."""
    rendered = rendered_server(count)
    for model in rendered.models:
        (repository / model.name).mkdir(parents=True)
        (repository / model.name / "config.pbtxt").write_text(model.desired.config_pbtxt)
        for path, data in model.files.items():
            (repository / model.name / path).parent.mkdir(parents=True, exist_ok=True)
            (repository / model.name / path).write_bytes(data)
    return [model.name for model in rendered.models]


async def all_ready(url: str, names: list[str]) -> None:
    async with ControlClient(url) as client:
        states = await client.model_states(names)
    unready = sorted(name for name in names if not (name in states and states[name].ready))
    assert not unready, f"not READY once Triton is live: {unready[:5]}"


def triton_own(count: int, repeats: int) -> list[float]:
    """Seconds from tritonserver's start to serving with every model loaded at its start-up, per repeat."""
    [server], _, _ = parse_resources([{**SERVER, "spec": {**SERVER["spec"], "replicas": 1}}])
    seconds = []
    with tempfile.TemporaryDirectory(prefix="startup-load-") as workdir:
        repository = Path(workdir) / "models"
        names = write_repository(count, repository)
        for repeat in range(repeats):
            ports = Ports(*free_ports(3))
            started = time.monotonic()
            # live only once every start-up load has ended: Triton opens its endpoints after them (checked below)
            with StartupTriton(
                server.spec, Path(workdir) / f"run-{repeat}", ports, model_repository=repository
            ) as triton:
                seconds.append(time.monotonic() - started)
                asyncio.run(all_ready(triton.grpc_url, names))
    return seconds


async def load_all(url: str, rendered: RenderedServer, parallel: int) -> None:
    desired = {model.name: model.desired for model in rendered.models}
    async with ControlClient(url) as client:
        report = await Replica(client, parallel).sync(desired, settle_seconds=None)
    unready = sorted(name for name in desired if not (name in report.states and report.states[name].ready))
    assert not unready, f"not loaded: {unready[:5]}"


def sync_alone(count: int, repeats: int, parallel: int) -> list[float]:
    """Seconds from an empty tritonserver's start to every model loaded by one sync, `parallel` at once."""
    rendered = rendered_server(count)
    seconds = []
    with tempfile.TemporaryDirectory(prefix="sync-alone-") as workdir:
        for repeat in range(repeats):
            started = time.monotonic()
            with LocalTriton(rendered.server.spec, Path(workdir) / f"run-{repeat}", Ports(*free_ports(3))) as triton:
                asyncio.run(load_all(triton.grpc_url, rendered, parallel))
                seconds.append(time.monotonic() - started)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="0,1,10,50", help="model counts to measure, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parallel", default="4", help="the sync-alone bounds to measure, comma-separated")
    parser.add_argument(
        "--apart", action="store_true", help="the operator and the mini cluster in processes of their own"
    )
    parser.add_argument("--serve-cluster", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_cluster:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve_cluster(args.serve_cluster))
        return
    bounds = [int(part) for part in args.parallel.split(",")]
    alone = " | ".join(f"sync alone, {bound} at once | ratio" for bound in bounds)
    print(
        "| models | Triton's own start-up load (median, range) | new pod Ready after scale-up | ratio "
        f"| from the pod's tritonserver start | ratio | {alone} |"
    )
    print("| --- | --- | --- | --- | --- | --- |" + " --- | --- |" * len(bounds))
    for count in (int(part) for part in args.models.split(",")):
        own = triton_own(count, args.repeats)
        pod, from_start = asyncio.run((measure_apart if args.apart else measure)(count, args.repeats))
        cells = [_seconds(own), _seconds(pod), _ratio(pod, own), _seconds(from_start), _ratio(from_start, own)]
        for bound in bounds:
            synced = sync_alone(count, args.repeats, bound)
            cells += [_seconds(synced), _ratio(synced, own)]
        print(f"| {count} | {' | '.join(cells)} |", flush=True)


def _ratio(seconds: list[float], own: list[float]) -> str:
    return f"{statistics.median(seconds) / statistics.median(own):.2f}x"


def _seconds(seconds: list[float]) -> str:
    return f"{statistics.median(seconds):.2f} s ({min(seconds):.2f}-{max(seconds):.2f})"


if __name__ == "__main__":
    main()
