"""A real Kubernetes control plane on this machine, built from source (cluster/build.sh into
.cluster/bin): etcd, kube-apiserver, kube-controller-manager and kube-scheduler as processes, each
with a log under `<directory>/logs/`, on loopback ports picked for them.

What is real: the API server (its decoding and structural pruning of CRDs, CEL, admission, RBAC,
server-side apply, the status and scale subresources), etcd, and Kubernetes' own controllers and
scheduler. The API server runs the admission plugins a cluster runs by default (ServiceAccount and
NamespaceLifecycle among them), RBAC and Node authorization, and routes an APIService to its
endpoints itself (`--enable-aggregator-routing`: there is no kube-proxy).

With `nodes` (root and `ip` needed) it runs the cluster's network (network.py: a bridge, pods in
network namespaces), its nodes (node.py: the process kubelet, a process per node) and the Service
proxy (proxy.py: each ClusterIP answers on this machine and in pods); without, the API server alone
on loopback (enough for what only the API server decides).

`make cluster` starts one in `.cluster/run` and returns once every component answers, leaving them
running (`python -m tests.support.controlplane up`); `make cluster-stop` ends them by the PIDs it
recorded. The tests start one of their own in a temporary directory.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.support.ports import free_ports

from .network import ClusterNetwork
from .pki import Authority, Pair, service_account_keys

ROOT = Path(__file__).resolve().parents[3]
BIN = ROOT / ".cluster/bin"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
# Without nodes (and a network): ranges no address is ever taken from on this machine.
SERVICE_CIDR = "10.0.0.0/24"
CLUSTER_CIDR = "10.244.0.0/16"  # each Node gets a /24 of it from the controller-manager (spec.podCIDR)
START_SECONDS = 120  # the most one component takes to answer on this 2-core machine, its first start included
STOP_SECONDS = 30
# The kinds whose status writes the API server's audit log keeps, request and response: a field the CRD's
# schema lacks is pruned from what is stored without a word, and only the two side by side show it.
AUDITED = ("tritonmodels", "tritonservers")
AUDITED_CALLERS = ("triton-system",)  # README's Helm install puts the operator there
PORT_TRIES = 3  # a port picked free can be taken before the component binds it: picked again


class ControlPlaneError(RuntimeError):
    """A component did not start; the message ends with the tail of its log."""


def missing_binaries() -> list[str]:
    """The components not built yet (`make cluster-build`); all four are needed."""
    return [name for name in COMPONENTS if not os.access(BIN / name, os.X_OK)]


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


@dataclass
class ControlPlane:
    """One control plane in `directory`: its PKI, etcd's data, kubeconfigs and logs."""

    directory: Path
    nodes: int = 0
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    network: ClusterNetwork | None = None
    apiserver_args: list[str] = field(default_factory=list)  # kept to start it again (api_server_away)

    @property
    def kubeconfig(self) -> Path:
        """The cluster admin's kubeconfig (group system:masters), context `triton-test`."""
        return self.directory / "kubeconfig"

    @property
    def address(self) -> str:
        """Where the API server (and everything else of the control plane) listens."""
        return self.network.host_address if self.network else "127.0.0.1"

    @property
    def service_cidr(self) -> str:
        return str(self.network.service_range) if self.network else SERVICE_CIDR

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.ports['apiserver']}"

    @property
    def audit_log(self) -> Path:
        """What the API server was asked to write to our kinds' status, with what it stored (AUDITED), and
        every request of the ServiceAccounts of AUDITED_CALLERS' namespaces, with its answer's code."""
        return self.logs / "audit.log"

    def _audit_policy(self) -> Path:
        rules = [
            {"level": "RequestResponse", "verbs": ["patch", "update"],
             "resources": [{"group": "triton-operator.io", "resources": [f"{kind}/status" for kind in AUDITED]}]},
            {"level": "Metadata", "userGroups": [f"system:serviceaccounts:{ns}" for ns in AUDITED_CALLERS]},
            {"level": "None"},
        ]  # fmt: skip
        policy = self.directory / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump({"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": rules}))
        return policy

    @property
    def node_names(self) -> list[str]:
        return [f"node-{number}" for number in range(1, self.nodes + 1)]

    @property
    def logs(self) -> Path:
        return self.directory / "logs"

    def start(self) -> None:
        """Every component started and answering, each in a session of its own: they outlive this
        process unless `stop` ends them (`make cluster` leaves them running)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        if self.nodes:
            self.network = ClusterNetwork.create()
        service_ip = str(next(ipaddress.ip_network(self.service_cidr).hosts()))
        pki = self.directory / "pki"
        authority = Authority(pki)
        self.ca = authority.pair.certificate
        self.service_account = service_account_keys(pki)
        self.front_proxy = Authority(pki / "front-proxy")
        serving = authority.issue(
            "apiserver",
            "kube-apiserver",
            addresses=(self.address, service_ip, "localhost", "kubernetes", "kubernetes.default",
                       "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"),
        )  # fmt: skip
        self.admin = authority.issue("admin", "triton-test-admin", "system:masters")
        clients = {
            "admin": self.admin,
            "controller-manager": authority.issue("controller-manager", "system:kube-controller-manager"),
            "scheduler": authority.issue("scheduler", "system:kube-scheduler"),
        }
        self.authority = authority
        try:
            self._start_with_ports("etcd", self._etcd)
            self._start_with_ports("kube-apiserver", lambda: self._apiserver(serving))
            for name, pair in clients.items():
                self.write_kubeconfig(self.directory / f"{name}.kubeconfig", pair)
            self._start_with_ports("kube-controller-manager", self._controller_manager)
            self._start_with_ports("kube-scheduler", self._scheduler)
            for name in self.node_names:
                self._node(name, authority.issue(name, f"system:node:{name}", "system:nodes"))
            if self.network:
                self._proxy(authority.issue("proxy", "system:kube-proxy"))
        except BaseException:
            self.stop()
            raise
        (self.directory / "kubeconfig").write_text((self.directory / "admin.kubeconfig").read_text())
        self._record()

    def write_kubeconfig(self, path: Path, pair: Pair, context: str = "triton-test") -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": self.server, "certificate-authority": str(self.ca)}}],
            "users": [
                {"name": context, "user": {"client-certificate": str(pair.certificate), "client-key": str(pair.key)}}
            ],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
            "current-context": context,
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)

    # Each component: its command line, then what answering means.

    def _etcd(self) -> None:
        client, peer = free_ports(2)
        self.ports.update(etcd=client)
        self._spawn(
            "etcd",
            [
                "--name=default",
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",  # a test cluster: nothing in it outlives the machine
                "--log-level=warn",
            ],
        )
        self._wait("etcd", f"http://127.0.0.1:{client}/health", lambda body: '"health":"true"' in body)

    def _apiserver(self, serving: Pair) -> None:
        (port,) = free_ports(1)
        self.ports.update(apiserver=port)
        front = self.front_proxy.issue("front-proxy-client", "front-proxy-client")
        self.apiserver_args = [
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            f"--bind-address={self.address}",
            f"--advertise-address={self.address}",
            f"--secure-port={port}",
            f"--cert-dir={self.directory / 'apiserver'}",
            f"--tls-cert-file={serving.certificate}",
            f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={self.ca}",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.service_account.certificate}",
            f"--service-account-signing-key-file={self.service_account.key}",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            "--enable-aggregator-routing=true",  # no kube-proxy: an APIService is reached at its endpoints
            f"--requestheader-client-ca-file={self.front_proxy.pair.certificate}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={front.certificate}",
            f"--proxy-client-key-file={front.key}",
            f"--audit-policy-file={self._audit_policy()}",
            f"--audit-log-path={self.audit_log}",
        ]
        self._spawn("kube-apiserver", self.apiserver_args)
        self._wait("kube-apiserver", f"{self.server}/readyz", lambda body: body.strip() == "ok", admin=True)

    @contextlib.contextmanager
    def api_server_away(self) -> Iterator[None]:
        """The API server ended for the block (SIGTERM, as an upgrade of it does), then started again
        on the same port, certificates and etcd; answering before the block's end returns."""
        order = list(self.processes)
        self._end("kube-apiserver")
        try:
            yield
        finally:
            self._spawn("kube-apiserver", self.apiserver_args)
            self.processes = {name: self.processes[name] for name in order}
            self._wait("kube-apiserver", f"{self.server}/readyz", lambda body: body.strip() == "ok", admin=True)
            self._record()

    def _client_component(self, name: str, identity: str, args: list[str]) -> None:
        """The controller-manager or the scheduler: a client of the API server as `identity` (its kubeconfig),
        serving its health on a loopback port of its own; the only one of its kind, so no election."""
        (port,) = free_ports(1)
        self.ports[name] = port
        kubeconfig = self.directory / f"{identity}.kubeconfig"
        common = [f"--{kind}kubeconfig={kubeconfig}" for kind in ("", "authentication-", "authorization-")]
        common += ["--bind-address=127.0.0.1", f"--secure-port={port}", "--leader-elect=false"]
        self._spawn(name, [*common, *args])
        self._wait(name, f"https://127.0.0.1:{port}/healthz", lambda body: body.strip() == "ok")

    def _controller_manager(self) -> None:
        self._client_component(
            "kube-controller-manager",
            "controller-manager",
            [
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.service_account.key}",
                f"--root-ca-file={self.ca}",
                f"--cluster-signing-cert-file={self.ca}",
                f"--cluster-signing-key-file={self.authority.pair.key}",
                "--allocate-node-cidrs=true",
                f"--cluster-cidr={self.network.pod_range if self.network else CLUSTER_CIDR}",
                f"--service-cluster-ip-range={self.service_cidr}",
                "--node-cidr-mask-size=24",
            ],
        )

    def _scheduler(self) -> None:
        self._client_component("kube-scheduler", "scheduler", [])

    def _node(self, name: str, pair: Pair) -> None:
        """A node process (node.py), answering once its Node is Ready with a podCIDR."""
        assert self.network is not None
        self._spawn_python(
            name,
            "tests.support.controlplane.node",
            [
                f"--name={name}",
                f"--server={self.server}",
                f"--ca={self.ca}",
                f"--certificate={pair.certificate}",
                f"--key={pair.key}",
                f"--network={self.network.index}",
                f"--workdir={self.directory / 'pods' / name}",
            ],
        )

        def ready(body: str) -> bool:
            node = json.loads(body)
            conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
            return conditions.get("Ready") == "True" and bool(node.get("spec", {}).get("podCIDR"))

        self._wait(name, f"{self.server}/api/v1/nodes/{name}", ready, admin=True)

    def _proxy(self, pair: Pair) -> None:
        """The Service proxy (proxy.py), answering once it serves the `kubernetes` Service."""
        assert self.network is not None
        self._spawn_python(
            "proxy",
            "tests.support.controlplane.proxy",
            [
                f"--server={self.server}",
                f"--ca={self.ca}",
                f"--certificate={pair.certificate}",
                f"--key={pair.key}",
                f"--network={self.network.index}",
            ],
        )
        service_ip = str(next(ipaddress.ip_network(self.service_cidr).hosts()))
        self._wait("proxy", f"https://{service_ip}:443/readyz", lambda body: body.strip() == "ok", admin=True)

    # Processes.

    def _spawn_python(self, name: str, module: str, args: list[str]) -> None:
        """A component of ours: this Python, from the repository's root (the tests package is there)."""
        self._spawn(name, ["-m", module, *args], program=sys.executable)

    def _start_with_ports(self, name: str, start: Callable[[], None]) -> None:
        for attempt in range(PORT_TRIES):
            try:
                start()
                return
            except ControlPlaneError as error:
                self._end(name)
                taken = "address already in use" in str(error)
                if not taken or attempt == PORT_TRIES - 1:
                    raise

    def _spawn(self, name: str, args: list[str], program: str | None = None) -> None:
        log = (self.logs / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [program or str(BIN / name), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: stopped as a whole, never by a terminal's ^C
            cwd=ROOT if program else self.directory,
        )
        log.close()

    def _wait(self, name: str, url: str, answered: Callable[[str], bool], admin: bool = False) -> None:
        """Until `url` answers as `answered` says, the process still running; else the log's tail."""
        # The controller-manager's and scheduler's serving certificates are their own self-signed ones.
        context = ssl.create_default_context(cafile=str(self.ca)) if admin else ssl._create_unverified_context()
        if admin:
            context.load_cert_chain(str(self.admin.certificate), str(self.admin.key))
        process = self.processes[name]
        deadline = time.monotonic() + START_SECONDS
        last = ""
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ControlPlaneError(f"{name} exited with {process.returncode}:\n{_tail(self.logs / f'{name}.log')}")
            try:
                with urllib.request.urlopen(url, timeout=5, context=context if url.startswith("https") else None) as r:
                    body = r.read().decode(errors="replace")
                if answered(body):
                    return
                last = body
            except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError) as error:
                last = str(error)
            time.sleep(0.2)  # a poll of the component's own health endpoint, bounded by START_SECONDS
        raise ControlPlaneError(
            f"{name} did not answer {url} in {START_SECONDS} s (last: {last[:300]}):\n"
            f"{_tail(self.logs / f'{name}.log')}"
        )

    def _end(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is not None and process.poll() is None:
            _end_group(process.pid, lambda seconds: _waited(process, seconds))

    def stop(self) -> None:
        """Every component ended, the last started first (the nodes first: they end their pods), then
        the network."""
        for name in reversed(list(self.processes)):
            self._end(name)
        if self.network is not None:
            self.network.remove()
        (self.directory / "state.json").unlink(missing_ok=True)

    def _record(self) -> None:
        """What `make cluster-stop` reads: each process's PID and command line (to check it is still
        ours), in the order they started, and the network's index."""
        processes = {
            name: {"pid": process.pid, "cmdline": _cmdline(process.pid)} for name, process in self.processes.items()
        }
        state = {"processes": processes, "network": self.network.index if self.network else None, "ports": self.ports}
        (self.directory / "state.json").write_text(json.dumps(state, indent=2))


def stop_recorded(directory: Path) -> list[str]:
    """End what a start recorded in `directory` (the processes still running that command line, the last
    started first, then the network); what was ended."""
    state_file = directory / "state.json"
    if not state_file.exists():
        return []
    state = json.loads(state_file.read_text())
    ended = []
    for name, process in reversed(state["processes"].items()):
        pid, cmdline = process["pid"], process["cmdline"]
        if _cmdline(pid) != cmdline:
            continue
        _end_group(pid, lambda seconds, pid=pid, cmdline=cmdline: _gone(pid, cmdline, seconds))
        ended.append(name)
    if state["network"] is not None:
        ClusterNetwork(state["network"]).remove()
        ended.append(f"network tkc{state['network']}")
    state_file.unlink()
    return ended


def _end_group(pid: int, ended: Callable[[float], bool]) -> None:
    """SIGTERM to a component's process group (its session), SIGKILL if `ended` does not see it end in time."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    if not ended(STOP_SECONDS):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        ended(STOP_SECONDS)


def _waited(process: subprocess.Popen[bytes], seconds: float) -> bool:
    try:
        process.wait(seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def _gone(pid: int, cmdline: str, seconds: float) -> bool:
    """Whether a process not ours to wait() on ended within `seconds`: its /proc entry is what tells."""
    deadline = time.monotonic() + seconds
    while _cmdline(pid) == cmdline:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


@contextlib.contextmanager
def control_plane(directory: Path, nodes: int = 0) -> Iterator[ControlPlane]:
    plane = ControlPlane(directory, nodes)
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()
