"""The operator's own cost: `triton-operator run -A` in a process of its own, on the emulated API server
(kmock) in another, as on a cluster, from the sources this script imports.

1. reload: a config edit -> the new revision serving on all 3 local Triton pods, against Triton's own
   reload of the same change on one server and on three at once (load call until the new config
   answers). Goal: at most 1.2x + 50 ms.
2. fleet, per size (1,000, 3,000 and 10,000 TritonModels on 3, 9 and 30 servers: 333 a server):
   - the time from start to every model's status written;
   - the operator's CPU per resync of every (unchanged) server, no pods: everything the process did
     in a window of resyncs, read from /proc, per resync of the whole fleet, once two windows in a
     row agree (the events of the statuses just written are handled first); goal under 100 ms per
     1,000 models;
   - its RSS after that (goal at 10,000: under 600 MB);
   - the API writes (requests) per new model, each model created alone after the fleet settled (the
     writes of the resyncs meanwhile, its server's Deployment and Service each, taken out);
   - the time from one model's edit (the PATCH sent) to its load call arriving at its pod: a stand-in
     for Triton's control API (tests/support/control_recorder.py) records the arrival; goal under 50 ms.
     The edits begin once the pod's 333 models are loaded, its server's status says so, and every
     server passed twice more: loading 333 models writes 333 statuses, and the operator handles their
     watch events (and a full collection of what they made) for a second or two after. The stand-in
     pod runs in this script's process, so this process's heap is frozen meanwhile: logged, its own
     full collections took 63-111 ms every ~6 s at 10,000 models, and an arrival during one is
     stamped late;
   - Python's full collections in the operator from every status written to the last edit, and how
     many took over 50 ms (from its triton_operator_gc_collection_seconds): an edit arriving during
     one waits for it, so these say what a few edits may not happen to meet.

    .venv/bin/python bench/operator_overhead.py [--part reload|fleet] [--repeats 5] [--sizes 1000 3000 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import copy
import gc
import json
import os
import select
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import aiohttp.web  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import triton_operator  # noqa: E402
from tests.support.control_recorder import ControlRecorder  # noqa: E402
from tests.support.models import ADD_CONFIG, add_code, python_model  # noqa: E402
from tests.support.operator import (  # noqa: E402
    NAMESPACE,
    OPERATOR_TOKEN,
    PATHS,
    Pods,
    api_server,
    pod_of,
    replica_set_of,
    running_at,
)
from tests.support.ports import free_ports  # noqa: E402
from tests.support.resources import FILES, MODEL, SERVER  # noqa: E402
from tests.support.serving import revision_of  # noqa: E402
from triton_operator.protocol.desired import DesiredModel  # noqa: E402
from triton_operator.protocol.names import GRPC_CONTROL_METADATA  # noqa: E402

MODELS_PER_SERVER = 333
LONG_COLLECTION = 0.05  # a bucket bound of the operator's collection histogram: the edit goal
RESYNC_SECONDS = 5
# Bounds of the waits, each many times what it takes on a busy 2-core machine: past one, the run has failed.
STARTED_SECONDS = 120  # a child process printing its URLs (its imports and servers up)
STATUSES_SECONDS = 1800  # every model's status written, at the largest fleet
PASSES_SECONDS = 300  # every server passing a few more times (a pass of each every RESYNC_SECONDS)
ENDED_SECONDS = 60  # a SIGKILLed process reaped
SERVED_SECONDS = 6 * 3600  # a child serving its parent, longer than any run: one left behind ends
WRITES = ("create", "update", "patch", "delete")


class Api:
    """The emulated API server in a process of its own: requests as a user (kubectl) makes them, and its
    tally of the operator's requests; or a real one (`tls`: its CA and a user's client certificate), which
    keeps no tally."""

    def __init__(self, url: str, tally_url: str, tls: ssl.SSLContext | None = None):
        self.url = url.rstrip("/")
        self.tally_url = tally_url
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls) if tls else None)

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        async with self.session.request(
            method, self.url + path, json=body, headers={"Content-Type": content_type}
        ) as response:
            payload = await response.json(content_type=None)
            if response.status == 404:
                return None
            assert response.status < 400, (method, path, payload)
            return payload

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", PATHS[obj["kind"]].format(ns=NAMESPACE), obj)

    async def get(self, kind: str, name: str) -> dict[str, Any] | None:
        return await self.request("GET", f"{PATHS[kind].format(ns=NAMESPACE)}/{name}")

    async def patch(self, kind: str, name: str, body: dict[str, Any], subresource: str = "") -> dict[str, Any]:
        path = f"{PATHS[kind].format(ns=NAMESPACE)}/{name}" + (f"/{subresource}" if subresource else "")
        return await self.request("PATCH", path, body, "application/merge-patch+json")

    async def operator_writes(self) -> Counter[str]:
        """The operator's write requests so far, by resource."""
        async with self.session.get(self.tally_url) as response:
            rows = await response.json()
        return Counter({row["resource"]: row["count"] for row in rows if row["verb"] in WRITES})

    async def wait(self, what: str, check: Callable[[], Any], timeout: float = 600, every: float = 0.05) -> Any:
        deadline = time.monotonic() + timeout
        while not (result := await check()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
            await asyncio.sleep(every)
        return result

    async def status_of(self, name: str) -> dict[str, Any]:
        return ((await self.get("TritonModel", name)) or {}).get("status") or {}

    async def add_pod(self, server: str, name: str, address: str, grpc_port: int) -> None:
        """A Pod as the server's Deployment's ReplicaSet would make it, running at this address."""
        deployment = await self.wait(f"Deployment {server}", lambda: self.get("Deployment", server))
        wanted = replica_set_of(deployment)
        replica_set = await self.get("ReplicaSet", wanted["metadata"]["name"]) or await self.create(wanted)
        await self.create(pod_of(replica_set, name, grpc_port))
        await self.patch("Pod", name, running_at(address), subresource="status")


@contextlib.asynccontextmanager
async def api_process() -> AsyncIterator[Api]:
    process = subprocess.Popen([sys.executable, __file__, "--serve-api"], stdout=subprocess.PIPE, text=True)
    try:
        url, tally_url = announced(process, "the emulated API server")
        api = Api(url, tally_url)
        try:
            yield api
        finally:
            await api.session.close()
    finally:
        # Killed: it holds nothing worth an orderly end, and its open watch streams would hold aiohttp's shutdown
        # a minute.
        process.kill()
        process.wait(timeout=ENDED_SECONDS)


def announced(process: subprocess.Popen[str], what: str) -> list[str]:
    """The words of the first line a child process prints (the URLs it serves), within STARTED_SECONDS."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], STARTED_SECONDS)
    if not ready:
        raise TimeoutError(f"{what} printed no URLs within {STARTED_SECONDS} s")
    line = process.stdout.readline()
    if not line:
        raise RuntimeError(f"{what} ended (exit code {process.poll()}) before printing its URLs")
    return line.split()


class OperatorProcess:
    def __init__(self, process: subprocess.Popen[bytes], metrics_url: str, log: Path, session: aiohttp.ClientSession):
        self.process = process
        self.metrics_url = metrics_url
        self.log = log
        self.session = session

    def alive(self) -> None:
        assert self.process.poll() is None, self.log.read_text()[-5000:]

    async def _samples(self, family_name: str, suffix: str) -> list[Any]:
        """One histogram's samples of one suffix (_count, _bucket). Only those are asked for (`name[]`): the
        whole exposition (at 1,000 models with one pod, 8,763 lines, 1.2 MB) took the operator 160-260 ms a
        read, and the edits poll it ten times a second."""
        params = {"name[]": family_name + suffix}
        async with self.session.get(self.metrics_url, params=params) as response:
            text = await response.text()
        return [
            sample
            for family in text_string_to_metric_families(text)
            if family.name == family_name
            for sample in family.samples
            if sample.name == family_name + suffix
        ]

    async def reconciles(self) -> dict[str, float]:
        """Passes so far, per server, from the operator's own histogram."""
        return {
            sample.labels["server"]: sample.value
            for sample in await self._samples("triton_operator_reconcile_seconds", "_count")
        }

    async def full_collections(self) -> tuple[float, float]:
        """Python's full collections in the operator so far: all, and those over LONG_COLLECTION."""
        buckets = {
            float(sample.labels["le"]): sample.value
            for sample in await self._samples("triton_operator_gc_collection_seconds", "_bucket")
            if sample.labels["generation"] == "2"
        }
        return buckets.get(float("inf"), 0.0), buckets.get(float("inf"), 0.0) - buckets.get(LONG_COLLECTION, 0.0)


@contextlib.asynccontextmanager
async def operator_process(
    api: Api, resync_seconds: float, kubeconfig: Path | None = None
) -> AsyncIterator[OperatorProcess]:
    """`triton-operator run -A` on this script's sources (a kubeconfig login, as outside a pod): `kubeconfig`,
    or one of the emulated API server's operator token."""
    with tempfile.TemporaryDirectory() as workdir:
        if kubeconfig is None:
            kubeconfig = Path(workdir) / "kubeconfig"
            kubeconfig.write_text(
                json.dumps(
                    {
                        "apiVersion": "v1",
                        "kind": "Config",
                        "current-context": "bench",
                        "clusters": [{"name": "bench", "cluster": {"server": api.url}}],
                        "users": [{"name": "bench", "user": {"token": OPERATOR_TOKEN}}],
                        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
                    }
                )
            )
        metrics_port, liveness_port = free_ports(2)
        sources = Path(triton_operator.__file__).resolve().parents[1]
        env = os.environ | {
            "PYTHONPATH": os.pathsep.join([str(sources), str(ROOT)]),
            "KUBECONFIG": str(kubeconfig),
            "TRITON_OPERATOR_RESYNC_SECONDS": str(resync_seconds),
            "TRITON_OPERATOR_METRICS_PORT": str(metrics_port),
            "TRITON_OPERATOR_LIVENESS_PORT": str(liveness_port),
            "TRITON_OPERATOR_LOG_LEVEL": "WARNING",
        }
        check = "import sys, triton_operator; print(triton_operator.__file__)"
        runs = subprocess.run(
            [sys.executable, "-c", check], env=env, capture_output=True, text=True, check=True, timeout=STARTED_SECONDS
        ).stdout.strip()
        assert Path(runs).resolve() == Path(triton_operator.__file__).resolve(), (runs, triton_operator.__file__)
        log = Path(workdir) / "operator.log"
        with log.open("w") as output:
            command = [
                sys.executable,
                "-c",
                "import sys; from triton_operator.cli import main; sys.exit(main())",
                "run",
                "-A",
            ]
            process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
            try:
                async with aiohttp.ClientSession() as session:
                    yield OperatorProcess(process, f"http://127.0.0.1:{metrics_port}/", log, session)
            finally:
                stop(process, timeout=120)


def stop(process: subprocess.Popen[Any], timeout: float) -> None:
    """SIGINT, as a terminal's Ctrl-C; killed if it has not ended within `timeout`."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"pid {process.pid} did not end within {timeout:.0f}s of SIGINT: killed", file=sys.stderr, flush=True)
        process.kill()
        process.wait(timeout=ENDED_SECONDS)


def memory_mb(pid: int) -> tuple[float, float]:
    """A process's resident memory now and at its peak."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def cpu_seconds(pid: int) -> float:
    """User and system CPU a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fleet_model(index: int, servers: int) -> dict[str, Any]:
    model = copy.deepcopy(MODEL)
    model["metadata"]["name"] = f"model-{index}"
    model["spec"]["serverRef"]["name"] = f"triton-{index % servers}"
    model["spec"]["config"]["maxBatchSize"] = 1 + index % 16
    return model


async def create_fleet(api: Api, models: int, servers: int, concurrency: int = 8) -> None:
    """The servers, the files, then the models, `concurrency` requests at once."""
    for index in range(servers):
        await api.create(copy.deepcopy(SERVER) | {"metadata": {"name": f"triton-{index}"}})
    await api.create(copy.deepcopy(FILES))
    limit = asyncio.Semaphore(concurrency)

    async def create(index: int) -> None:
        async with limit:
            await api.create(fleet_model(index, servers))

    await asyncio.gather(*(create(index) for index in range(models)))


STEADY = 0.2  # two windows this close (a fraction of the first) make the figure
MAX_WINDOWS = 8


async def resync_cpu(
    operator: OperatorProcess, servers: int, passes: int, resync_seconds: float
) -> tuple[float, int, list[float]]:
    """The operator's CPU per resync of every server once it is steady: windows in which each server
    passed `passes` times, one after another, until two in a row agree within STEADY (at most
    MAX_WINDOWS). Every status written is not yet steady: the watch events of those writes (one or two a
    model) are still being handled for a while after, longer the larger the fleet. Returns the last
    window's CPU over the passes made / servers, its passes, and every window's figure."""
    windows: list[float] = []
    made = 0
    while len(windows) < MAX_WINDOWS and not (
        len(windows) >= 2 and abs(windows[-1] - windows[-2]) <= STEADY * windows[-2]
    ):
        cpu, made = await resync_window(operator, servers, passes, resync_seconds)
        windows.append(cpu)
    return windows[-1], made, windows


async def every_server_passed(
    operator: OperatorProcess, servers: int, passes: int, since: dict[str, float] | None = None
) -> dict[str, float]:
    """Once each server has passed `passes` more times than at `since` (default: now), its metrics read a
    second apart: their counts then."""
    start = await operator.reconciles() if since is None else since
    now = start if since is None else await operator.reconciles()
    deadline = time.monotonic() + PASSES_SECONDS
    while (fewest := min(now.get(f"triton-{i}", 0) - start.get(f"triton-{i}", 0) for i in range(servers))) < passes:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"timed out after {PASSES_SECONDS} s waiting for every server to pass {passes} more times "
                f"(the fewest: {fewest:g})"
            )
        await asyncio.sleep(1)
        now = await operator.reconciles()
    return now


async def resync_window(
    operator: OperatorProcess, servers: int, passes: int, resync_seconds: float
) -> tuple[float, int]:
    """All the operator did while each server passed `passes` times, per resync of them all. Its metrics
    are read at the window's ends only (a read costs it CPU), and a second more at a time when a pass is
    still missing."""
    before, cpu_before = await every_server_passed(operator, servers, 1), cpu_seconds(operator.process.pid)
    await asyncio.sleep(passes * resync_seconds)
    after = await every_server_passed(operator, servers, passes, since=before)
    cpu = cpu_seconds(operator.process.pid) - cpu_before
    made = int(sum(after[s] - before[s] for s in before))
    return cpu / (made / servers), made


async def writes_per_new_model(api: Api, servers: int, count: int) -> tuple[Counter[str], int]:
    """The operator's writes for each of `count` new models, each created alone and waited for, with the
    resyncs' writes meanwhile taken out, and how many resyncs those were. Every resync applies its
    server's Deployment and Service once each, and a model never writes a Service: each Service written
    is one resync's two writes. (A resync that is also a new model's pass writes the Deployment once for
    both: the model's figure is then one write low.)"""
    before = await api.operator_writes()
    for index in range(count):
        model = fleet_model(10**6 + index, servers)
        await api.create(model)
        await api.wait("the new model's status", lambda: _has_status(api, model["metadata"]["name"]), every=0.02)
    await asyncio.sleep(1)  # writes the last status brings (the server's) land
    writes = await api.operator_writes() - before
    resyncs = writes.pop("services", 0)
    return writes - Counter(deployments=resyncs), resyncs


async def _has_status(api: Api, name: str) -> bool:
    return bool((await api.status_of(name)).get("configHash"))


QUIET_SECONDS = 0.3  # no control call for this long: the pod's sync has ended (the next resync is seconds away)


async def edits_to_load_call(
    api: Api, operator: OperatorProcess, recorder: ControlRecorder, servers: int, repeats: int
) -> tuple[list[float], list[float]]:
    """Per edit of a model on triton-0, sent once a pass of it has ended and its pod's sync too (a sync
    still reading the pod's state holds the next one: a pod is never synced twice at once): the PATCH
    sent -> the first control call arriving at the pod, and -> the model's load call."""
    first, load = [], []
    for attempt in range(repeats):
        name = f"model-{attempt * servers}"  # on triton-0
        old = (await api.status_of(name))["configHash"]
        passes = (await operator.reconciles())["triton-0"]
        await api.wait("a pass of triton-0, its pod quiet", lambda: _quiet_after(operator, recorder, passes), every=0.1)
        edited = {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": 200 + attempt}}}}
        sent = time.perf_counter()
        await api.patch("TritonModel", name, edited)
        load.append((await recorder.first_call(sent, method="load", model=name)).arrived - sent)
        first.append((await recorder.first_call(sent)).arrived - sent)
        await api.wait("the edit's status", lambda: _hash_changed(api, name, old))
    return first, load


async def _quiet_after(operator: OperatorProcess, recorder: ControlRecorder, passes: float) -> bool:
    quiet = not recorder.calls or recorder.calls[-1].arrived < time.perf_counter() - QUIET_SECONDS
    return quiet and (await operator.reconciles())["triton-0"] > passes


async def _hash_changed(api: Api, name: str, old: str) -> bool:
    return (await api.status_of(name)).get("configHash") not in (None, old)


async def fleet(models: int, repeats: int) -> dict[str, Any]:
    servers = max(1, models // MODELS_PER_SERVER)
    figures: dict[str, Any] = {"models": models, "servers": servers}
    async with api_process() as api:
        await create_fleet(api, models, servers)
        async with operator_process(api, resync_seconds=RESYNC_SECONDS) as operator, ControlRecorder() as recorder:
            started = time.perf_counter()
            await api.wait(
                "every model's status written",
                lambda: alive_and(operator, _statuses_written(api, models)),
                timeout=STATUSES_SECONDS,
                every=1,
            )
            figures["first"] = time.perf_counter() - started
            collections_settled = await operator.full_collections()
            figures["resync_cpu"], figures["passes"], figures["resync_windows"] = await resync_cpu(
                operator, servers, passes=3, resync_seconds=RESYNC_SECONDS
            )
            figures["rss"], figures["peak"] = memory_mb(operator.process.pid)
            new = 10
            writes, figures["resyncs_meanwhile"] = await writes_per_new_model(api, servers, new)
            figures["writes"] = {resource: count / new for resource, count in sorted(writes.items())}
            await api.add_pod("triton-0", "triton-0-pod", "127.0.0.1", recorder.port)
            on_pod = len(range(0, models, servers))
            await api.wait(
                "every model of triton-0 loaded on its pod", lambda: _loaded(recorder, on_pod), timeout=300, every=0.2
            )
            await api.wait(
                "the pod in service, in triton-0's status",
                lambda: _ready_replicas(api, "triton-0"),
                timeout=300,
                every=0.2,
            )
            await every_server_passed(
                operator, servers, 2
            )  # the load's aftermath handled: the watch events of 333 statuses
            gc.collect()
            # The stand-in pod stamps arrivals in this process: its own full collections must not delay them.
            gc.freeze()
            try:
                figures["first_call"], figures["edit"] = await edits_to_load_call(
                    api, operator, recorder, servers, repeats
                )
            finally:
                gc.unfreeze()
            figures["rss_end"], figures["peak_end"] = memory_mb(operator.process.pid)
            figures["full_collections"], figures["long_collections"] = (
                b - a for a, b in zip(collections_settled, await operator.full_collections(), strict=False)
            )
            operator.alive()
    return figures


async def alive_and(operator: OperatorProcess, check: Awaitable[Any]) -> Any:
    """`check`'s answer, the operator still running (else its log's tail)."""
    operator.alive()
    return await check


async def _statuses_written(api: Api, models: int) -> bool:
    return (await api.operator_writes())["tritonmodels/status"] >= models


async def _ready_replicas(api: Api, server: str) -> int:
    return (((await api.get("TritonServer", server)) or {}).get("status") or {}).get("readyReplicas", 0)


async def _loaded(recorder: ControlRecorder, count: int) -> bool:
    return len(recorder.configs) >= count


SERVING_SECONDS = 120  # a reload on a busy 2-core machine takes a second or two; far past that, it failed


def wait_serving(urls: list[str], old: str, key: str) -> None:
    """Poll every server until it serves a revision other than `old` (in a thread: the loop stays free).
    The revision is read from the model's config, which answers only to the server's control `key`."""
    clients = {url: grpcclient.InferenceServerClient(url) for url in urls}
    try:
        deadline = time.monotonic() + SERVING_SECONDS
        pending = set(urls)
        while pending:
            if time.monotonic() > deadline:
                served = {url: revision_of(clients[url], key=key) for url in sorted(pending)}
                raise AssertionError(f"not serving a revision other than {old!r} in {SERVING_SECONDS} s: {served}")
            pending = {url for url in pending if revision_of(clients[url], key=key) in ("", old)}
            time.sleep(0.002)
    finally:
        for client in clients.values():
            client.close()


async def config_edits(repeats: int) -> dict[str, list[float]]:
    """Per repeat: the edit through the operator onto 3 pods, and Triton's own reload of it on one and on three
    servers."""
    times: dict[str, list[float]] = {"operator": [], "raw one": [], "raw three": []}
    with tempfile.TemporaryDirectory() as workdir:
        pods = Pods(Path(workdir))
        try:
            async with api_process() as api, operator_process(api, resync_seconds=60):
                for obj in (SERVER | {"spec": {**SERVER["spec"], "replicas": 3}}, FILES, MODEL):
                    await api.create(copy.deepcopy(obj))
                key = await api.wait("the control key", lambda: _control_key(api, "triton"))
                tritons = [pods.start(f"pod-{i}", key) for i in range(3)]
                for i, triton in enumerate(tritons):
                    await api.add_pod("triton", f"pod-{i}", triton.address, triton.ports.grpc)
                await api.wait("ready on 3 pods", lambda: _replicas(api, "add", "3/3"), timeout=300)
                references = [pods.start(f"reference-{i}", key).grpc_url for i in range(3)]
                await edit_times(api, [t.grpc_url for t in tritons], references, key, repeats, times)
        finally:
            leftovers = pods.stop_all()
            assert not leftovers, f"/dev/shm regions left behind: {leftovers}"
    return times


async def edit_times(
    api: Api, urls: list[str], references: list[str], key: str, repeats: int, times: dict[str, list[float]]
) -> None:
    """Per repeat, into `times`: the add model edited through the operator until its pods (`urls`) serve the new
    revision, then Triton's own reload of the change on one and on three `references` at once."""
    for attempt in range(repeats):
        delay = 100 + attempt + 1
        old = (await api.status_of("add"))["configHash"]
        started = time.perf_counter()
        await api.patch(
            "TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": delay}}}}
        )
        await asyncio.to_thread(wait_serving, urls, old, key)
        times["operator"].append(time.perf_counter() - started)
        await api.wait("statuses written", lambda: _hash_changed(api, "add", old), timeout=SERVING_SECONDS)
        times["raw one"].append(await asyncio.to_thread(raw_reload, references[:1], key, delay))
        times["raw three"].append(await asyncio.to_thread(raw_reload, references, key, delay))


async def _control_key(api: Api, server: str) -> str | None:
    secret = await api.get("Secret", f"{server}-control")
    return base64.b64decode(secret["data"]["control-key"]).decode() if secret else None


async def _replicas(api: Api, name: str, replicas: str) -> bool:
    return (await api.status_of(name)).get("replicas") == replicas


def raw_reload(urls: list[str], key: str, delay: int) -> float:
    """Triton's own reload of the same change, on these servers at once: the load calls until every one serves it."""
    before, after = (
        python_model("add", {**ADD_CONFIG, "dynamicBatching": {"maxQueueDelayMicroseconds": d}}, add_code())
        for d in (delay, delay + 1000)
    )
    headers = {GRPC_CONTROL_METADATA: key}

    def load(url: str, model: DesiredModel) -> None:
        client = grpcclient.InferenceServerClient(url)
        try:
            client.load_model(
                "add",
                headers=headers,
                config=model.config_json,
                files={f"file:{p}": c for p, c in model.files.items()},
                client_timeout=SERVING_SECONDS,
            )
        finally:
            client.close()

    with ThreadPoolExecutor(len(urls)) as pool:
        list(pool.map(lambda url: load(url, before), urls))
        started = time.perf_counter()
        list(pool.map(lambda url: load(url, after), urls))
    wait_serving(urls, before.revision, key)
    return time.perf_counter() - started


async def serve_api() -> None:
    """The emulated API server, and its tally of the operator's requests as JSON on a second port."""
    async with api_server(request_history=16) as cluster:

        async def tally(_: aiohttp.web.Request) -> aiohttp.web.Response:
            rows = [
                {"verb": call.verb, "resource": call.resource, "count": count}
                for (authorization, call), count in cluster.server.tally.items()
                if authorization == f"Bearer {OPERATOR_TOKEN}"
            ]
            merged: Counter[tuple[str, str]] = Counter()
            for row in rows:
                merged[(row["verb"], row["resource"])] += row["count"]
            return aiohttp.web.json_response([{"verb": v, "resource": r, "count": c} for (v, r), c in merged.items()])

        await serve_beside(cluster.url, "/tally", tally)


async def serve_beside(api_url: str, path: str, handler: Callable[[aiohttp.web.Request], Awaitable[Any]]) -> None:
    """A JSON endpoint beside an emulated API server in a process of its own: both URLs printed on one line
    for the parent, then served until the process is stopped."""
    app = aiohttp.web.Application()
    app.router.add_get(path, handler)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    [port] = free_ports(1)
    await aiohttp.web.TCPSite(runner, "127.0.0.1", port).start()
    print(api_url, f"http://127.0.0.1:{port}{path}", flush=True)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(SERVED_SECONDS)
            raise TimeoutError(f"served {SERVED_SECONDS} s: the benchmark that started this process never stopped it")
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[1000, 3000, 10000], help="TritonModels in the fleet, one run each"
    )
    parser.add_argument("--part", choices=["all", "reload", "fleet"], default="all", help="run one half only")
    parser.add_argument("--serve-api", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_api:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve_api())
        return
    print(f"operator sources: {Path(triton_operator.__file__).resolve().parent}", flush=True)
    if args.part in ("all", "reload"):
        reload_part(args.repeats)
    if args.part in ("all", "fleet"):
        fleet_part(args.sizes, args.repeats)


def reload_part(repeats: int) -> None:
    times = asyncio.run(config_edits(repeats))
    op, raw, raw_three = (statistics.median(times[name]) for name in ("operator", "raw one", "raw three"))
    print("| measure | median | goal |")
    print("| --- | --- | --- |")
    print(
        f"| config edit -> new revision on 3 pods, through the operator | {op * 1000:.0f} ms "
        f"| <= {1.2 * raw * 1000 + 50:.0f} ms |"
    )
    print(f"| Triton's own reload of the same change, one server | {raw * 1000:.0f} ms | |")
    print(
        f"| ratio to one server | {op / raw:.2f}x | <= 1.2x + 50 ms: {'met' if op <= 1.2 * raw + 0.05 else 'missed'} |"
    )
    print(f"| Triton's own reload of the same change, 3 servers at once | {raw_three * 1000:.0f} ms | |")
    print(
        f"| ratio to 3 servers at once | {op / raw_three:.2f}x "
        f"| <= 1.2x + 50 ms: {'met' if op <= 1.2 * raw_three + 0.05 else 'missed'} |"
    )
    print(
        "repeats (ms): " + "; ".join(f"{name} {[round(t * 1000) for t in values]}" for name, values in times.items()),
        flush=True,
    )


def fleet_part(sizes: list[int], repeats: int) -> None:
    results = []
    for size in sizes:
        figures = asyncio.run(fleet(size, repeats))
        results.append(figures)
        print(json.dumps(figures), flush=True)
    print(
        "| TritonModels (servers) | start to every status | CPU per resync of all servers (per 1,000 models) "
        "| RSS after the resyncs (peak) | API writes per new model | edit -> first control call, median (max) "
        "| edit -> its load call, median (max) | full collections after every status (over 50 ms) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for f in results:
        writes = sum(f["writes"].values())
        detail = (
            ", ".join(f"{resource} {count:g}" for resource, count in f["writes"].items())
            + f" ({f['resyncs_meanwhile']} resyncs' writes taken out)"
        )
        print(
            f"| {f['models']} ({f['servers']}) | {f['first']:.0f} s "
            f"| {f['resync_cpu'] * 1000:.0f} ms ({f['resync_cpu'] * 1000 / (f['models'] / 1000):.0f} ms) "
            f"| {f['rss']:.0f} MB ({f['peak']:.0f} MB) | {writes:g}: {detail} "
            f"| {statistics.median(f['first_call']) * 1000:.1f} ms ({max(f['first_call']) * 1000:.1f} ms) "
            f"| {statistics.median(f['edit']) * 1000:.1f} ms ({max(f['edit']) * 1000:.1f} ms) "
            f"| {f['full_collections']:.0f} ({f['long_collections']:.0f}) |"
        )
    if len(results) > 1:
        first, last = results[0], results[-1]
        slope = (last["rss"] - first["rss"]) * 2**20 / (last["models"] - first["models"])
        print(f"RSS slope from {first['models']} to {last['models']} models: {slope / 1024:.1f} KiB a model")


if __name__ == "__main__":
    main()
