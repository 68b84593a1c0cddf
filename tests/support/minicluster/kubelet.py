"""The kubelet of one node: every Pod bound to it (spec.nodeName) runs as processes on this machine.
What differs between the mini cluster's node and a node of the built control plane (where it lives,
how a pod is networked and launched, what an image runs) is a `Site`: this module's is the mini
cluster's, tests/support/controlplane/node.py's the other. The rules kept, each standing for the
real kubelet's:

- Network (the mini cluster's Site): a pod's IP is a loopback address of its own, 127.N.x.y, N from
  this test process, so that two test runs on one machine (other worktrees) never share one. Its container keeps the
  template's ports on that address; a port something else listens on there fails the pod, saying so.
- Container: one per pod (a pod of more fails, saying so), besides the memory sidecar below. command +
  args with $(VAR) expanded from env (`value`; `secretKeyRef` and `configMapKeyRef` read from the API;
  `fieldRef` of the pod's name, namespace, uid, node, service account, podIP and hostIP), run in a
  process group of its own with stdout and stderr in <workdir>/<namespace>/<pod>/<container>.log.
  Images are left out by the mini cluster's Site: the command is run as found here.
- Volumes: each is a directory <workdir>/<namespace>/<pod>/volumes/<name>, holding what a ConfigMap,
  Secret or projected source (a TokenRequest service-account token) gives. There are no mount
  namespaces here (a node of the built control plane binds what is under /run: node.py),
  so an arg naming a mountPath (whole, or after `=`) names that directory instead, and TMPDIR is the
  /tmp mount's directory for the programs that honour it (Triton does not: docs/triton-facts.md).
- `tritonserver` is the wheel's binary (find_tritonserver), given what a pod's own network and
  filesystem would: --http-, --grpc- and --metrics-address on the pod's IP (Triton binds 0.0.0.0);
  --backend-directory on a copy of the wheel's backends (the image's /opt/tritonserver/backends);
  a python-backend shm prefix of the pod's own, since its /dev/shm is the host's: the prefix tells
  its regions apart, and they are removed when the pod ends, as its emptyDir would be.
- The memory sidecar (`triton-operator memory-sidecar`, a TritonServer's memoryReader): a container
  whose command is that is not run as a process. It would see the pod's processes alone, its pod
  sharing one process namespace; this machine's /proc holds every test's. So the kubelet serves the
  sidecar's own app (memory/sidecar.py) on the pod's IP at the container's port, reading the stubs
  among the processes of the pod's process group (tritonserver's, its stubs included), from the
  container's start to its end.
- Status: podIP; phase Running once the process runs; containerStatuses (started once the
  startupProbe passes, ready while the readinessProbe does, restartCount, state); conditions
  ContainersReady and Ready: Ready is True only while the container is ready and every
  readinessGate condition is True, and False again as soon as one is not. Probes (httpGet,
  tcpSocket) run every `probe_seconds` rather than their periodSeconds, with their
  failureThreshold; a container without one is ready once started.
- Deletion (a deletionTimestamp: the API server's graceful deletion, tests/support/cluster.py): the
  preStop hook (`sleep`, or `exec` run here), then SIGTERM to the container's main process, then
  SIGKILL to its process group once deletionGracePeriodSeconds have passed since the kubelet saw
  the deletion (preStop included); what is left of the group is killed when the main process ends
  (a container's PID namespace ends with its first process); then the Pod is deleted for good
  (gracePeriodSeconds=0).
- Left out: restarts (restartCount stays 0: a container that exits on its own is a failure, kept in
  `failures`, and its pod stays not Ready), liveness probes, init containers, envFrom, httpGet
  hooks, resources and security contexts.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import logging
import os
import re
import secrets
import signal
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from triton_operator.local.tritonserver import SHM_DIR, find_tritonserver
from triton_operator.memory.attribution import read_stubs
from triton_operator.memory.sidecar import reader_app

from .client import AWAY_RETRY_SECONDS, PODS, STRATEGIC_MERGE_PATCH, ApiClient, ApiError
from .controller import NODE, is_terminating

logger = logging.getLogger(__name__)
POD_NETWORK = 100 + os.getpid() % 150  # 127.POD_NETWORK.0.0/16 holds this test process's pod IPs
_pod_numbers = itertools.count()
SHUTDOWN_GRACE_SECONDS = 10  # at the end of a test: SIGTERM, then SIGKILL after at most this
GROUP_EXIT_SECONDS = 10  # the most a killed process group takes to end, before a leftover is reported
# What the kubelet reads in command, args and env values: `$$` (a `$`) or a `$(NAME)` reference.
REFERENCE = re.compile(r"\$(?:\$|\(([^)]*)\))")


def next_pod_address() -> str:
    number = next(_pod_numbers)
    return f"127.{POD_NETWORK}.{number // 250 + 1}.{number % 250 + 1}"


class PodFailed(Exception):
    """The pod cannot run here; the message says why."""


@dataclass(frozen=True)
class Placement:
    """Where one pod's processes run: its address, the prefix that puts a process there (a network
    namespace's `ip netns exec`; nothing on loopback), and how to take it down."""

    address: str
    prefix: tuple[str, ...] = ()
    remove: Callable[[], None] = lambda: None
    files: tuple[tuple[str, Path], ...] = ()  # (path in the pod, file here): what the node writes for it
    hostname: str = ""  # where the place has a UTS namespace of its own
    memory_volumes: tuple[tuple[str, int | None], ...] = ()  # (path in the pod, tmpfs bytes): mounted private


class Site:
    """What a node is made of on this machine; this one is the mini cluster's: the node `mini`, pods on
    loopback addresses of their own, each container's command run as found (images are left out)."""

    node = NODE
    pods_path = PODS  # where the node's pods are listed and watched
    pods_query: Mapping[str, str] = {}
    host_ip: str | None = None

    def place(self, pod: Mapping[str, Any]) -> Placement:
        return Placement(next_pod_address())

    def program(self, container: Mapping[str, Any]) -> list[str]:
        """The container's command and args as the node runs them (an image's entrypoint, here none)."""
        words = (container.get("command") or []) + (container.get("args") or [])
        if not words:
            raise PodFailed("no command: images (and their entrypoints) are left out of the mini kubelet")
        return words

    def launch(self, placement: Placement, mounts: Mapping[str, Path], argv: list[str]) -> list[str]:
        """The argv that runs `argv` in the pod's place, its volumes mounted."""
        return [*placement.prefix, *argv]

    def environment(self) -> dict[str, str]:
        """What the node adds to every container's env (the real kubelet: the `kubernetes` Service's)."""
        return {}

    async def failed(self, pod: Mapping[str, Any], message: str) -> None:
        """A pod that cannot run here: the mini cluster keeps it in `Kubelet.failures` alone."""


@dataclass(frozen=True)
class KubeletEvent:
    at: float  # time.monotonic()
    pod: str
    what: str  # started, terminating, preStop, preStop-done, SIGTERM, SIGKILL, exited, shm-removed, deleted
    detail: str = ""


def processes_in_groups(groups: set[int]) -> list[str]:
    """The live processes (not zombies) in these process groups: "pid: command line" each."""
    found = []
    for pid in pids_in_groups(groups):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found.append(f"{pid}: {command}")
    return found


def pids_in_groups(groups: set[int]) -> list[int]:
    """The live processes (not zombies) in these process groups."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, _parent, group = (entry / "stat").read_text().rpartition(")")[2].split()[:3]
        except (OSError, ValueError):
            continue
        if state != "Z" and int(group) in groups:
            found.append(int(entry.name))
    return found


class Kubelet:
    """Runs the pods bound to the node; `events` is its log, `failures` what went wrong in a pod."""

    WATCHED = (PODS,)

    def __init__(self, api: ApiClient, workdir: Path, probe_seconds: float = 0.2, site: Site | None = None):
        self.api = api
        self.workdir = workdir
        self.probe_seconds = probe_seconds
        self.site = site or Site()
        self.install = find_tritonserver()
        self.shm_prefix = f"mini_{os.getpid()}_{secrets.token_hex(3)}_"
        self.pods: dict[str, PodRunner] = {}  # by uid
        self.groups: set[int] = set()  # every process group it started
        self.events: list[KubeletEvent] = []
        self.failures: list[str] = []
        self.probes: aiohttp.ClientSession | None = None

    async def run(self) -> None:
        # A new connection per probe, as the kubelet's: a kept one would outlive a server's refusal of new ones.
        self.probes = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
        await self.api.follow(self.site.pods_path, self._seen, self.site.pods_query)

    def _seen(self, kind: str, pod: dict[str, Any]) -> None:
        if pod["spec"].get("nodeName") != self.site.node:
            return
        runner = self.pods.get(pod["metadata"]["uid"])
        if runner is None and kind != "DELETED":
            runner = self.pods[pod["metadata"]["uid"]] = PodRunner(self, pod)
        if runner is not None:
            runner.update(pod, gone=kind == "DELETED")

    def fail(self, failure: str) -> None:
        """What went wrong in a pod: kept for the test to read, and said at once in the log."""
        self.failures.append(failure)
        logger.warning("%s", failure)

    def log(self, pod: str, what: str, detail: str = "") -> None:
        self.events.append(KubeletEvent(time.monotonic(), pod, what, detail))
        logger.info("pod %s: %s %s", pod, what, detail)

    def pod_log(self, pod: str) -> list[KubeletEvent]:
        return [event for event in self.events if event.pod == pod]

    async def shutdown(self) -> None:
        """The node goes away with the test: every pod's processes stopped (SIGTERM, SIGKILL after at
        most SHUTDOWN_GRACE_SECONDS), their shm regions removed; the API is not told."""
        await asyncio.gather(*(runner.stop() for runner in self.pods.values()))
        if self.probes is not None:
            await self.probes.close()

    def leftovers(self) -> list[str]:
        """Processes of the pods still running, and /dev/shm regions of theirs still there."""
        return processes_in_groups(self.groups) + [str(region) for region in SHM_DIR.glob(f"{self.shm_prefix}*")]


# What a restarting API server answers until it is whole (403 before its RBAC caches are filled, 429
# and 5xx while it starts): a status write refused so is made again, as the kubelet does.
PASSING_REFUSALS = frozenset({403, 429, 500, 503})


def _own_conditions(status: Mapping[str, Any]) -> dict[str, str]:
    """The pod conditions the kubelet writes, by type."""
    return {c["type"]: c["status"] for c in status.get("conditions") or [] if c["type"] in ("ContainersReady", "Ready")}


class PodRunner:
    """One pod: its container's process, probes and status, and its termination."""

    def __init__(self, kubelet: Kubelet, pod: dict[str, Any]):
        self.kubelet = kubelet
        self.pod = pod
        self.name = pod["metadata"]["name"]
        self.namespace = pod["metadata"]["namespace"]
        self.path = f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"
        self.container: dict[str, Any] = pod["spec"]["containers"][0]
        self.readers = [c for c in pod["spec"]["containers"][1:] if _is_memory_sidecar(c)]
        self.reader_sites: list[web.AppRunner] = []
        self.directory = kubelet.workdir / self.namespace / self.name
        self.placement: Placement | None = None
        self.shm_prefix = f"{kubelet.shm_prefix}{self.name}_"
        self.gone = False  # deleted from the API
        self.waiting = {"reason": "ContainerCreating"}  # why the container is not running yet
        self.process: asyncio.subprocess.Process | None = None
        self.exit_code: int | None = None
        self.terminating = False
        self.started = self.ready = False
        self.written: dict[str, Any] | None = None  # the status as last written
        self.wakes: set[asyncio.Event] = set()
        self.env: dict[str, str] = {}
        self.task = asyncio.get_running_loop().create_task(self.run())
        self.task.add_done_callback(self._crashed)

    def _crashed(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.kubelet.fail(f"pod {self.name}: the kubelet failed on it: {task.exception()!r}")

    def update(self, pod: dict[str, Any], gone: bool) -> None:
        self.pod, self.gone = pod, self.gone or gone
        if self.written is not None and _own_conditions(pod.get("status") or {}) != _own_conditions(self.written):
            # Changed by another (the node lifecycle controller marks pods not Ready while their node's
            # heartbeat is stale): written again as the kubelet sees them, as its status manager does.
            self.written = None
        self._changed()

    def _changed(self) -> None:
        for wake in self.wakes:
            wake.set()

    async def _until(self, condition: Callable[[], bool]) -> None:
        wake = asyncio.Event()
        self.wakes.add(wake)
        try:
            while not condition():
                await wake.wait()
                wake.clear()
        finally:
            self.wakes.discard(wake)

    async def run(self) -> None:
        helpers = [asyncio.create_task(self._report())]
        try:
            try:
                await self._start()
            except PodFailed as failure:
                self.waiting = {"reason": "CreateContainerError", "message": str(failure)}
                self.kubelet.fail(f"pod {self.name}: {failure}")
                await self.kubelet.site.failed(self.pod, str(failure))
                self._changed()
            else:
                helpers += [asyncio.create_task(self._probe()), asyncio.create_task(self._watch_exit())]
            await self._until(lambda: self.gone or is_terminating(self.pod))
            await self._terminate()
        finally:
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
        if not self.gone:
            with contextlib.suppress(ApiError):  # gone meanwhile: deleted with grace 0 by someone else
                await self._write(self._status())
                await self.kubelet.api.request("DELETE", self.path, {"gracePeriodSeconds": 0})
        self.kubelet.log(self.name, "deleted")

    async def _start(self) -> None:
        spec = self.pod["spec"]
        if len(spec["containers"]) != 1 + len(self.readers):
            raise PodFailed(
                f"it has {len(spec['containers'])} containers; "
                "the mini kubelet runs pods of one (and the memory sidecar)"
            )
        if "envFrom" in self.container:
            raise PodFailed("envFrom is left out of the mini kubelet")
        pre_stop = (self.container.get("lifecycle") or {}).get("preStop") or {}
        if pre_stop.keys() - {"sleep", "exec"}:
            raise PodFailed(f"preStop {sorted(pre_stop)} is left out of the mini kubelet (sleep and exec are run)")
        for kind in ("startupProbe", "readinessProbe"):
            if kind in self.container and not self.container[kind].keys() & {"httpGet", "tcpSocket"}:
                raise PodFailed(
                    f"{kind} {sorted(self.container[kind])} is left out of the mini kubelet "
                    "(httpGet and tcpSocket are run)"
                )
        self.directory.mkdir(parents=True, exist_ok=True)
        self.placement = await asyncio.to_thread(self.kubelet.site.place, self.pod)
        if self.readers and self.placement.prefix:
            raise PodFailed("the memory sidecar is served on loopback pods only (the mini cluster's)")
        self.env = await self._environment()
        await self._fill_volumes()
        command = await self._command()
        if not self.placement.prefix:  # a network namespace of its own has every port free
            self._check_ports()
        with (self.directory / f"{self.container['name']}.log").open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *self.kubelet.site.launch(self.placement, self._mounts(), command),
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=self._process_environment(),
                cwd=self.directory,
                start_new_session=True,
            )
        self.kubelet.groups.add(self.process.pid)
        self.kubelet.log(self.name, "started", " ".join(command))
        await self._serve_readers(self.process.pid)
        self.started = not self.container.get("startupProbe")
        self._changed()

    @property
    def address(self) -> str:
        return self.placement.address if self.placement else ""

    def _is_triton(self) -> bool:
        return (self.container.get("command") or [""])[0] == "tritonserver"

    async def _environment(self) -> dict[str, str]:
        """The container's env, as its spec gives it."""
        fields = {
            "metadata.name": self.name,
            "metadata.namespace": self.namespace,
            "metadata.uid": self.pod["metadata"]["uid"],
            "spec.nodeName": self.kubelet.site.node,
            "spec.serviceAccountName": self.pod["spec"].get("serviceAccountName", "default"),
            "status.podIP": self.address,
            "status.hostIP": self.kubelet.site.host_ip or self.address,
        }
        env: dict[str, str] = {}
        for variable in self.container.get("env") or []:
            source = variable.get("valueFrom") or {}
            if "secretKeyRef" in source or "configMapKeyRef" in source:
                kind = "secrets" if "secretKeyRef" in source else "configmaps"
                ref = source.get("secretKeyRef") or source["configMapKeyRef"]
                data = await self._data(kind, ref["name"], f"${variable['name']}")
                env[variable["name"]] = data[ref["key"]].decode()
            elif "fieldRef" in source:
                path = source["fieldRef"]["fieldPath"]
                if path not in fields:
                    raise PodFailed(f"fieldRef {path} is left out of the mini kubelet (it has {', '.join(fields)})")
                env[variable["name"]] = fields[path]
            else:
                env[variable["name"]] = expand_references(variable.get("value", ""), env)
        return env

    async def _data(self, kind: str, name: str, purpose: str) -> dict[str, bytes]:
        """A Secret's or ConfigMap's data in the pod's namespace, decoded."""
        try:
            found = await self.kubelet.api.request("GET", f"/api/v1/namespaces/{self.namespace}/{kind}/{name}")
        except ApiError as error:
            raise PodFailed(f"{kind[:-1]} {name} for {purpose}: {error} (the real kubelet waits for it)") from None
        if kind == "secrets":
            return {key: base64.b64decode(value) for key, value in (found.get("data") or {}).items()}
        return {key: value.encode() for key, value in (found.get("data") or {}).items()}

    async def _fill_volumes(self) -> None:
        """Each ConfigMap, Secret and projected volume's files, as the kubelet writes them (emptyDirs stay
        empty); a projected service-account token comes from the TokenRequest API, bound to the pod."""
        for volume in self.pod["spec"].get("volumes") or []:
            directory = self.directory / "volumes" / volume["name"]
            directory.mkdir(parents=True, exist_ok=True)
            sources = volume.get("projected", {}).get("sources") or [volume]
            for source in sources:
                files = await self._volume_files(source)
                for path, content in files.items():
                    (directory / path).parent.mkdir(parents=True, exist_ok=True)
                    (directory / path).write_bytes(content)

    async def _volume_files(self, source: Mapping[str, Any]) -> dict[str, bytes]:
        for key, kind, name_key in (("configMap", "configmaps", "name"), ("secret", "secrets", "secretName")):
            if key in source:
                ref = source[key]
                data = await self._data(kind, ref[name_key], f"volume {ref[name_key]}")
                items = ref.get("items") or [{"key": k, "path": k} for k in data]
                return {item["path"]: data[item["key"]] for item in items}
        if "serviceAccountToken" in source:
            account = self.pod["spec"].get("serviceAccountName", "default")
            request = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "expirationSeconds": source["serviceAccountToken"].get("expirationSeconds", 3607),
                    "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": self.name,
                                       "uid": self.pod["metadata"]["uid"]},
                },
            }  # fmt: skip
            path = f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{account}/token"
            token = await self.kubelet.api.request("POST", path, request)
            return {source["serviceAccountToken"]["path"]: token["status"]["token"].encode()}
        if "downwardAPI" in source:
            values = {"metadata.namespace": self.namespace, "metadata.name": self.name}
            return {
                item["path"]: values[item["fieldRef"]["fieldPath"]].encode()
                for item in source["downwardAPI"].get("items") or []
                if item.get("fieldRef", {}).get("fieldPath") in values
            }
        return {}

    def _process_environment(self) -> dict[str, str]:
        """The container's env over this machine's (with the wheel's libraries: it has no image), TMPDIR
        on the /tmp mount; no GPU, as the mini cluster's nodes offer none."""
        mounts = self._mounts()
        tmp = {"TMPDIR": str(mounts["/tmp"])} if "/tmp" in mounts else {}
        return {
            **self.kubelet.install.environment(visible_gpus=""),
            **self.kubelet.site.environment(),
            **self.env,
            **tmp,
        }

    def _mounts(self) -> dict[str, Path]:
        """Each volume mount's directory here, by mountPath."""
        mounts = {}
        for mount in self.container.get("volumeMounts") or []:
            directory = self.directory / "volumes" / mount["name"]
            directory.mkdir(parents=True, exist_ok=True)
            mounts[mount["mountPath"]] = directory
        return mounts

    async def _command(self) -> list[str]:
        words = [expand_references(word, self.env) for word in self.kubelet.site.program(self.container)]
        mounts = self._mounts()
        words = [_on_this_machine(word, mounts) for word in words]
        if not self._is_triton():
            return words
        backends = await asyncio.to_thread(self.kubelet.install.backends_in, self.directory / "backends")
        return [
            str(self.kubelet.install.binary),
            *words[1:],
            f"--http-address={self.address}",
            f"--grpc-address={self.address}",
            f"--metrics-address={self.address}",
            f"--backend-directory={backends}",
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
        ]

    async def _serve_readers(self, group: int) -> None:
        """The memory sidecars' app, reading the stubs of the pod's process group."""
        for reader in self.readers:
            runner = web.AppRunner(reader_app(lambda: read_stubs(pids=pids_in_groups({group}))))
            await runner.setup()
            await web.TCPSite(runner, self.address, reader["ports"][0]["containerPort"]).start()
            self.reader_sites.append(runner)
            self.kubelet.log(self.name, "started", " ".join(reader["command"]))

    async def _stop_readers(self) -> None:
        for runner in self.reader_sites:
            await runner.cleanup()
        self.reader_sites.clear()

    def _check_ports(self) -> None:
        for port in [p for container in [self.container, *self.readers] for p in container.get("ports") or []]:
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed socket in TIME_WAIT is no owner
                try:
                    probe.bind((self.address, port["containerPort"]))
                except OSError as error:
                    raise PodFailed(
                        f"port {port['containerPort']} ({port.get('name', 'unnamed')}) is taken on {self.address}, "
                        "the pod's own address "
                        f"({error.strerror}): something else listens there"
                    ) from None

    def _port(self, port: int | str) -> int:
        if isinstance(port, int):
            return port
        return next(p["containerPort"] for p in self.container.get("ports") or [] if p.get("name") == port)

    async def _passes(self, probe: Mapping[str, Any] | None) -> bool:
        if probe is None:
            return True
        timeout = aiohttp.ClientTimeout(total=probe.get("timeoutSeconds", 1))
        try:
            if "httpGet" in probe:
                assert self.kubelet.probes is not None
                url = f"http://{self.address}:{self._port(probe['httpGet']['port'])}{probe['httpGet'].get('path', '/')}"
                async with self.kubelet.probes.get(url, timeout=timeout) as response:
                    return 200 <= response.status < 400
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(self.address, self._port(probe["tcpSocket"]["port"])), timeout.total
            )
            writer.close()
            return True
        except (TimeoutError, OSError, aiohttp.ClientError):
            return False

    async def _probe(self) -> None:
        readiness = self.container.get("readinessProbe")
        failures = 0
        while True:
            if not self.started:
                self.started = await self._passes(self.container.get("startupProbe"))
            else:
                passed = await self._passes(readiness)
                failures = 0 if passed else failures + 1
                self.ready = passed or (self.ready and failures < (readiness or {}).get("failureThreshold", 3))
            self._changed()
            await asyncio.sleep(self.kubelet.probe_seconds)

    async def _watch_exit(self) -> None:
        assert self.process is not None
        self.exit_code = await self.process.wait()
        self.ready = False
        if not self.terminating:
            log = (self.directory / f"{self.container['name']}.log").read_text(errors="replace")[-2000:]
            self.kubelet.fail(
                f"pod {self.name}: its container exited on its own with {self.exit_code}; the end of its log:\n{log}"
            )
        self._changed()

    async def _terminate(self) -> None:
        grace = 0 if self.gone else self.pod["metadata"].get("deletionGracePeriodSeconds", 0)
        deadline = time.monotonic() + grace
        self.terminating = True
        self.kubelet.log(self.name, "terminating", f"grace {grace}s")
        if self.process is not None and self.exit_code is None:
            await self._pre_stop(deadline)
            self.kubelet.log(self.name, "SIGTERM")
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            await self._end(deadline)
        await self._release()

    async def _pre_stop(self, deadline: float) -> None:
        hook = (self.container.get("lifecycle") or {}).get("preStop")
        if not hook:
            return
        self.kubelet.log(self.name, "preStop")
        remaining = max(0.0, deadline - time.monotonic())
        if "sleep" in hook:
            await asyncio.sleep(min(hook["sleep"]["seconds"], remaining))
        else:
            with (self.directory / f"{self.container['name']}.log").open("ab") as log:
                assert self.placement is not None
                hook_process = await asyncio.create_subprocess_exec(
                    *self.kubelet.site.launch(self.placement, self._mounts(), hook["exec"]["command"]),
                    stdout=log,
                    stderr=asyncio.subprocess.STDOUT,
                    env=self._process_environment(),
                    cwd=self.directory,
                    start_new_session=True,
                )
            self.kubelet.groups.add(hook_process.pid)
            try:
                await asyncio.wait_for(hook_process.wait(), remaining)
            except TimeoutError:
                pass
            finally:  # out of time, or the kubelet stopping mid-hook: the hook ends with its pod
                if hook_process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                        os.killpg(hook_process.pid, signal.SIGKILL)
                    await hook_process.wait()
        self.kubelet.log(self.name, "preStop-done")

    async def _end(self, deadline: float) -> None:
        """Wait for the main process until the deadline, SIGKILL the group then; and what is left of it after."""
        assert self.process is not None
        try:
            await asyncio.wait_for(self.process.wait(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            self.kubelet.log(self.name, "SIGKILL")
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.killpg(self.process.pid, signal.SIGKILL)
        code = await self.process.wait()
        await self._end_group()
        self.kubelet.log(self.name, "exited", str(code))

    async def _end_group(self) -> None:
        """What is left of the container's processes (a stub outlives its tritonserver) killed, as a
        cgroup's kill ends them, and gone: SIGKILL is sent at once, but a process takes a moment to end
        (a stub freeing its memory, on a busy machine)."""
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        deadline = time.monotonic() + GROUP_EXIT_SECONDS
        while pids_in_groups({self.process.pid}) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    async def _release(self) -> None:
        """What the pod held besides its processes: the readers' sites, its shm regions, its network."""
        await self._stop_readers()
        self._remove_shm()
        if self.placement is not None:
            await asyncio.to_thread(self.placement.remove)

    def _remove_shm(self) -> None:
        for region in SHM_DIR.glob(f"{self.shm_prefix}*"):
            self.kubelet.log(self.name, "shm-removed", region.name)
            region.unlink(missing_ok=True)

    def _status(self) -> dict[str, Any]:
        running = self.process is not None and self.exit_code is None
        gates = [gate["conditionType"] for gate in self.pod["spec"].get("readinessGates") or []]
        conditions = {c["type"]: c["status"] for c in (self.pod.get("status") or {}).get("conditions") or []}
        containers_ready = running and self.ready
        ready = containers_ready and all(conditions.get(gate) == "True" for gate in gates)
        if running:
            state: dict[str, Any] = {"running": {}}
        elif self.exit_code is not None:
            state = {"terminated": {"exitCode": self.exit_code}}
        else:
            state = {"waiting": self.waiting}
        host = {"hostIP": self.kubelet.site.host_ip, "hostIPs": [{"ip": self.kubelet.site.host_ip}]}
        addresses = {"podIP": self.address, "podIPs": [{"ip": self.address}]} if self.address else {}
        return {
            "phase": "Pending" if self.process is None else "Running",
            **addresses,
            **(host if self.kubelet.site.host_ip else {}),
            "conditions": [
                {"type": "ContainersReady", "status": str(containers_ready)},
                {"type": "Ready", "status": str(ready)},
            ],
            "containerStatuses": [
                {
                    "name": self.container["name"],
                    "image": self.container.get("image", ""),
                    "started": running and self.started,
                    "ready": containers_ready,
                    "restartCount": 0,
                    "state": state,
                }
            ],
        }

    async def _report(self) -> None:
        while True:
            await self._until(lambda: self._status() != self.written)
            try:
                await self._write(self._status())
            except ApiError as error:
                if error.status in PASSING_REFUSALS:
                    await asyncio.sleep(AWAY_RETRY_SECONDS)
                    continue
                if error.status != 404:  # gone: deleted with grace 0 by someone else
                    self.kubelet.fail(f"pod {self.name}: its status was refused: {error}")
                return
            except (aiohttp.ClientError, OSError):
                await asyncio.sleep(AWAY_RETRY_SECONDS)  # the API server is away: written once it is back

    async def _write(self, status: dict[str, Any]) -> None:
        if status == self.written:
            return
        before = {c["type"]: c["status"] for c in (self.written or {}).get("conditions", [])}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        conditions = [
            {**c, "lastTransitionTime": now} if before.get(c["type"]) != c["status"] else c
            for c in status["conditions"]
        ]
        await self.kubelet.api.patch_status(self.path, {**status, "conditions": conditions}, STRATEGIC_MERGE_PATCH)
        self.written = status

    async def stop(self) -> None:
        """At shutdown: the pod's processes ended and its shm removed, whatever it was doing."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        if self.process is not None and self.process.returncode is None:
            self.terminating = True
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
            await self._end(time.monotonic() + min(grace, SHUTDOWN_GRACE_SECONDS))
        elif self.process is not None:  # it exited while its termination was cut short
            await self._end_group()
        await self._release()


def _is_memory_sidecar(container: Mapping[str, Any]) -> bool:
    return (container.get("command") or [])[:2] == ["triton-operator", "memory-sidecar"]


def expand_references(word: str, env: Mapping[str, str]) -> str:
    """$(VAR) from the container's env, as the kubelet expands command, args and env values: an unknown
    one stays as written, and `$$` is a `$` (Kubernetes' escape)."""
    return REFERENCE.sub(lambda match: "$" if match[0] == "$$" else env.get(match[1], match[0]), word)


def _on_this_machine(word: str, mounts: Mapping[str, Path]) -> str:
    """An arg naming a mountPath, whole or after `=`, names the volume's directory here instead."""
    prefix, value = "", word
    if word.startswith("-") and "=" in word:
        flag, value = word.split("=", 1)
        prefix = f"{flag}="
    for mount_path, directory in mounts.items():
        if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
            return f"{prefix}{directory}{value[len(mount_path) :]}"
    return word
