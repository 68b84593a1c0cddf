"""Several operators on one emulated API server, for leader election (tests/k8s/test_lease.py, bench/failover.py).

- `RecordingApiServer`: the emulator, plus who wrote what when (`writes`: every request but a GET,
  with its arrival time on this process's monotonic clock, its bearer token and its status, refused
  ones too: the emulator's `faults` refuse requests on purpose).
- `writer_spans` and `one_writer_at_a_time`: from `writes`, when each operator wrote anything but the
  Lease, and the check that no two did so at once.
- An operator three ways, each with a token of its own: `OperatorProcess` (`triton-operator run -A`
  in a process, with a kubeconfig of its own, to be SIGKILLed), `ThreadedOperator` (in-process, in a
  thread with its own event loop, so two kopfs do not share one loop) and `elected_operator` (in this
  event loop, with leader election, as `running_operator` is without).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import kmock
import kopf

from tests.support.cluster import ApiServer
from tests.support.operator import NAMESPACE, OPERATOR_TOKEN, Cluster
from tests.support.ports import free_ports
from triton_operator.k8s.election.leading import kopf_terms, run_elected
from triton_operator.k8s.process.settings import Settings
from triton_operator.k8s.watch.handlers import register

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
# Short timings for tests: a standby takes over 3 s after it last saw the Lease change.
SHORT = {"lease_duration_seconds": 3, "renew_deadline_seconds": 2, "retry_period_seconds": 0.5}
# A server: its worker writes its Deployment, whose replicas the tests edit.
SERVER = {
    "apiVersion": "triton-operator.io/v1alpha1",
    "kind": "TritonServer",
    "metadata": {"name": "triton"},
    "spec": {"replicas": 1, "backends": ["python"]},
}


@dataclass(frozen=True)
class Write:
    at: float  # time.monotonic() when the API server received it
    token: str  # who: the bearer token
    method: str
    path: str
    status: int

    @property
    def lease(self) -> bool:
        return self.path.startswith("/apis/coordination.k8s.io/")


@attrs.define(kw_only=True)
class RecordingApiServer(ApiServer):
    writes: list[Write] = attrs.field(factory=list, init=False)

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        at = time.monotonic()
        response = await super()._handle(request)
        if request.method.value != "GET":
            token = request.headers.get("Authorization", "").removeprefix("Bearer ")
            self.writes.append(Write(at, token, request.method.value, request.url.path, response.status))
        return response


@contextlib.asynccontextmanager
async def recording_api_server() -> AsyncIterator[tuple[Cluster, RecordingApiServer]]:
    async with RecordingApiServer() as server, kmock.Server(server) as http:
        cluster = Cluster(server, str(http.url))
        await cluster.request(
            "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        yield cluster, server


def lease(cluster: Cluster, name: str = "triton-operator", namespace: str = NAMESPACE) -> dict[str, Any] | None:
    """The Lease as the API server holds it, or None."""
    key = (kmock.resource("coordination.k8s.io/v1/leases"), namespace, name)
    if key not in cluster.server.objects or cluster.server.objects[key].deleted:
        return None
    return dict(cluster.server.objects[key].raw)


def writer_spans(writes: Sequence[Write]) -> dict[str, tuple[float, float]]:
    """Per operator (token): the arrival of its first and of its last write of anything but the Lease,
    refused ones too. The test's own requests, as a user's, carry no token."""
    spans: dict[str, tuple[float, float]] = {}
    for write in writes:
        if write.token and not write.lease:
            first, _ = spans.get(write.token, (write.at, write.at))
            spans[write.token] = (first, write.at)
    return spans


def one_writer_at_a_time(writes: Sequence[Write], leaders: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Only `leaders` wrote (anything but the Lease), each after the one before had written for the last
    time; raises AssertionError naming the overlap otherwise. Returns the spans."""
    spans = writer_spans(writes)
    assert set(spans) <= set(leaders), f"operators that never led wrote: {sorted(set(spans) - set(leaders))}"
    ordered = [(token, spans[token]) for token in leaders if token in spans]
    for (before, (_, last)), (after, (first, _)) in itertools.pairwise(ordered):
        assert first > last, (
            f"{after} wrote at {first:.3f} while {before} still wrote until {last:.3f}: two operators syncing at once"
        )
    return spans


def kubeconfig(path: Path, url: str, token: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": url}}],
        "users": [{"name": "test", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
    }))  # fmt: skip
    return path


class OperatorProcess:
    """`triton-operator run -A` in a process of its own: POD_NAME `name`, token `operator-<name>` (or the
    `login` kubeconfig, for a real API server), leader election on with the SHORT timings unless `settings`
    say otherwise."""

    def __init__(self, workdir: Path, url: str, name: str, login: Path | None = None, **settings: Any):
        self.name, self.token = name, f"operator-{name}"
        self.metrics_port, liveness_port = free_ports(2)
        values = {
            "leader_election": True,
            "lease_namespace": NAMESPACE,
            **SHORT,
            "retry_seconds": 0.2,
            "log_level": "INFO",
        }
        values |= {"metrics_port": self.metrics_port, "liveness_port": liveness_port, **settings}
        self.liveness_port = values["liveness_port"]
        self.env = os.environ | {f"TRITON_OPERATOR_{key.upper()}": str(value) for key, value in values.items()}
        login = login or kubeconfig(workdir / f"{name}.kubeconfig", url, self.token)
        self.env |= {"KUBECONFIG": str(login), "POD_NAME": name}
        self.env.pop("POD_NAMESPACE", None)
        self.log_path = workdir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        with self.log_path.open("wb") as log:
            command = [str(Path(sys.executable).parent / "triton-operator"), "run", "-A"]
            self.process = subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        return self

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    async def exited(self, timeout: float) -> int:
        """The exit code, waiting for it up to `timeout` seconds."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"operator {self.name} still runs after {timeout}s:\n{self.log()}")
            await asyncio.sleep(0.05)
        return self.process.returncode

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def scrape(self, path: str) -> str:
        port = self.metrics_port if path == "/metrics" else self.liveness_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.read().decode()

    def leader_gauge(self) -> float | None:
        """triton_operator_leader from its /metrics; None while it does not answer yet."""
        try:
            text = self.scrape("/metrics")
        except OSError:
            return None
        return next(
            (float(line.split()[1]) for line in text.splitlines() if line.startswith("triton_operator_leader ")), None
        )


def _login(url: str, token: str) -> Callable[..., Any]:
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=url, insecure=True, token=token)

    return login


class ThreadedOperator:
    """The operator in a thread of its own with its own event loop, as `run -A` runs it (with or without
    leader election, per `settings`), logging in with `token`. `returned` is run's exit code once it stopped."""

    def __init__(self, url: str, token: str, **settings: Any):
        self.url, self.token = url, token
        self.settings = Settings(
            **({"metrics_port": 0, "liveness_port": 0, "retry_seconds": 0.2, "lease_namespace": NAMESPACE} | settings)
        )
        self.returned: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name=f"operator {token}", daemon=True)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        login = _login(self.url, self.token)
        self._started.set()
        if self.settings.leader_election:
            self.returned = await run_elected(
                self.settings, kopf_terms(self.settings, login, clusterwide=True), login, self._stop
            )
        else:
            registry = kopf.OperatorRegistry()
            register(registry, self.settings, login=login)
            await kopf.operator(registry=registry, clusterwide=True, standalone=True, stop_flag=self._stop)
            self.returned = 0

    def start(self) -> ThreadedOperator:
        self._thread.start()
        self._started.wait(30)
        return self

    async def stop(self, timeout: float = 30) -> int | None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        await asyncio.to_thread(self._thread.join, timeout)
        assert not self._thread.is_alive(), f"operator {self.token} did not stop in {timeout}s"
        return self.returned


@contextlib.asynccontextmanager
async def elected_operator(cluster: Cluster, namespaces: Sequence[str] = (), **settings: Any) -> AsyncIterator[None]:
    """The operator in this event loop with leader election, as `running_operator` runs it without:
    enters once it leads and kopf is ready; stopped cleanly (the Lease released) at the end."""
    values = {
        "resync_seconds": 60,
        "retry_seconds": 0.2,
        "metrics_port": 0,
        "liveness_port": 0,
        "leader_election": True,
        **SHORT,
    } | settings
    parsed = Settings(**values)
    login = _login(cluster.url, OPERATOR_TOKEN)
    operate = kopf_terms(parsed, login, clusterwide=not namespaces, namespaces=list(namespaces))
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run_elected(parsed, operate, login, stop, ready))
    waiting = asyncio.ensure_future(ready.wait())
    await asyncio.wait({task, waiting}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if task.done():
        task.result()  # its failure, if it failed
    assert ready.is_set(), "the operator did not start leading"
    try:
        yield
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 30) == 0
