"""A node of the built control plane: the project's process kubelet (tests/support/minicluster/kubelet.py)
on the real API server, as a process of its own (`python -m tests.support.controlplane.node ...`).

What it does as the kubelet does, each standing for the real one's:
- registers its Node (CAPACITY, and `nvidia.com/gpu` where asked; InternalIP the
  cluster's host address; nodeInfo), marks it Ready, and renews its Lease in kube-node-lease every
  RENEW_SECONDS, writing its status again with it (the node-lifecycle controller marks a node
  Unknown, and its pods not Ready, after 50 s without one; the pods' conditions are then written again);
- waits for the controller-manager to give it a podCIDR, and runs each pod the scheduler binds to it
  in a network namespace with an address from that range (tests/support/controlplane/network.py);
- authenticates as `system:node:<name>` (group system:nodes), so the Node authorizer lets it read only
  the Secrets and ConfigMaps of its own pods and request their service-account tokens;
- images: a container runs what the IMAGES table says its image is (there is no container runtime);
  any other image fails the pod, with an Event on it saying so;
- a volume mounted under /run or /var/run (a service-account token's) is bind-mounted there in the
  pod's own mount namespace (a tmpfs over /run, private to the pod), so in-cluster clients find their
  token where they look; a memory-backed emptyDir (a pod's /dev/shm) is a tmpfs of its sizeLimit
  mounted there, so Triton's python backend has only the /dev/shm its pod spec sizes; other volumes
  are directories named in the command line (the mini kubelet's rule);
- the pod's env gets KUBERNETES_SERVICE_HOST/PORT (the `kubernetes` Service's ClusterIP); its hostname
  is the pod's name (a UTS namespace of its own); its /etc/hosts (the node's own file for it,
  bind-mounted) names the pod and that ClusterIP as kubernetes.default.svc and the rest of its names,
  which in-cluster clients (kopf's) ask for; there is no cluster DNS, so its /etc/resolv.conf names a
  nameserver in the pod itself, where none listens: any other name fails at once (the host's
  resolver is not reachable from a pod, and asking it held a pod's start for seconds).

Left out: a container runtime and its isolation (PID and user namespaces, cgroups, security contexts),
image pulls, restarts, and the memory sidecar (a pod that has one fails, saying so).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import fnmatch
import logging
import os
import shlex
import signal
import ssl
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.minicluster.client import MERGE_PATCH, ApiClient, ApiError
from tests.support.minicluster.kubelet import PASSING_REFUSALS, Kubelet, Placement, PodFailed, Site
from triton_operator.api.types import parse_quantity

from .network import ClusterNetwork

RENEW_SECONDS = 10
LEASE_SECONDS = 40
ROOT = Path(__file__).resolve().parents[3]
KUBERNETES_VERSION = "v1.36.3"
# Image (repository, glob) -> the command it runs here; a container's own `command` comes first where it has one.
IMAGES = {
    "nvcr.io/nvidia/tritonserver": ["tritonserver"],  # NVIDIA's Triton images: the nvidia-pytriton wheel's
    "*tritonserver*": ["tritonserver"],  # slim Triton images `triton-operator image` builds
    "*triton-operator": ["triton-operator", "run"],  # the operator's image (its ENTRYPOINT)
}
# The programs a container may name, and what runs for each here (the kubelet gives tritonserver the wheel's).
PROGRAMS = {"tritonserver": "tritonserver", "triton-operator": str(ROOT / ".venv/bin/triton-operator")}


def repository(image: str) -> str:
    """The image's name without its tag or digest."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name[: len(name) - len(last)] + last.split(":", 1)[0]


class NodeSite(Site):
    def __init__(self, name: str, network: ClusterNetwork, api: ApiClient, service_host: str, workdir: Path):
        self.node = name
        self.workdir = workdir
        self.pods_path = "/api/v1/pods"
        self.pods_query = {"fieldSelector": f"spec.nodeName={name}"}
        self.host_ip = network.host_address
        self.network = network
        self.api = api
        self.service_host = service_host
        self.pod_cidr = ""
        self.taken: set[str] = set()
        self.placing = threading.Lock()

    def place(self, pod: Mapping[str, Any]) -> Placement:
        with self.placing:  # pods start in threads of their own: one address each
            sandbox = self.network.sandbox(self.pod_cidr, self.taken, label=f"n{self.node.rsplit('-', 1)[-1]}")
            self.taken.add(sandbox.address)

        hosts = self.workdir / "hosts" / sandbox.namespace
        resolver = self.workdir / "resolv" / sandbox.namespace
        for file in (hosts, resolver):
            file.parent.mkdir(parents=True, exist_ok=True)
        resolver.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        names = " ".join(
            f"kubernetes{suffix}" for suffix in ("", ".default", ".default.svc", ".default.svc.cluster.local")
        )
        hosts.write_text(
            f"127.0.0.1\tlocalhost\n{sandbox.address}\t{pod['metadata']['name']}\n{self.service_host}\t{names}\n"
        )

        def remove() -> None:
            sandbox.remove()
            hosts.unlink(missing_ok=True)
            resolver.unlink(missing_ok=True)
            with self.placing:
                self.taken.discard(sandbox.address)

        files = (("/etc/hosts", hosts), ("/etc/resolv.conf", resolver))
        prefix = (*sandbox.prefix, "unshare", "--uts")
        return Placement(
            sandbox.address, prefix, remove, files=files, hostname=pod["metadata"]["name"], memory_volumes=tmpfs(pod)
        )

    def program(self, container: Mapping[str, Any]) -> list[str]:
        command = list(container.get("command") or [])
        if not command:
            image = repository(container.get("image", ""))
            command = next((words for pattern, words in IMAGES.items() if fnmatch.fnmatch(image, pattern)), [])
            if not command:
                raise PodFailed(
                    f"image {container.get('image')!r} is not one this node runs (no container runtime here: "
                    f"it runs {', '.join(IMAGES)})"
                )
        if command[0] in PROGRAMS:
            command = [PROGRAMS[command[0]], *command[1:]]
        elif not Path(command[0]).is_absolute():
            raise PodFailed(f"command {command[0]!r}: this node runs {', '.join(PROGRAMS)} (no images here)")
        return [*command, *(container.get("args") or [])]

    def environment(self) -> dict[str, str]:
        return {
            "KUBERNETES_SERVICE_HOST": self.service_host,
            "KUBERNETES_SERVICE_PORT": "443",
            "KUBERNETES_SERVICE_PORT_HTTPS": "443",
        }

    def launch(self, placement: Placement, mounts: Mapping[str, Path], argv: list[str]) -> list[str]:
        """In the pod's network namespace, with a mount namespace of its own (`ip netns exec` makes one,
        private): the node's files for it bound in place, volumes under /run bound on a tmpfs of its own,
        memory-backed emptyDirs each a tmpfs of its size."""
        binds = [(path, directory) for path, directory in mounts.items() if path.startswith(("/run/", "/var/run/"))]
        script = ["mount -t tmpfs -o mode=755 tmpfs /run"] if binds else []  # the host's /run stays as it is
        for path, directory in binds:
            inside = shlex.quote("/run/" + path.split("/run/", 1)[1])
            script += [f"mkdir -p {inside}", f"mount --bind {shlex.quote(str(directory))} {inside}"]
        script += [f"mount --bind {shlex.quote(str(file))} {shlex.quote(path)}" for path, file in placement.files]
        for path, size in placement.memory_volumes:
            options = f"size={size}" if size is not None else "defaults"
            script += [f"mkdir -p {shlex.quote(path)}", f"mount -t tmpfs -o {options} tmpfs {shlex.quote(path)}"]
        script.append(f"hostname {shlex.quote(placement.hostname)}")
        return [*placement.prefix, "sh", "-c", " && ".join(script) + ' && exec "$@"', "sh", *argv]

    async def failed(self, pod: Mapping[str, Any], message: str) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        metadata = pod["metadata"]
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{metadata['name']}.", "namespace": metadata["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": metadata["name"],
                               "namespace": metadata["namespace"], "uid": metadata["uid"]},
            "reason": "Failed",
            "message": message,
            "type": "Warning",
            "source": {"component": "kubelet", "host": self.node},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }  # fmt: skip
        with contextlib.suppress(ApiError):
            await self.api.request("POST", f"/api/v1/namespaces/{metadata['namespace']}/events", event)


def tmpfs(pod: Mapping[str, Any]) -> tuple[tuple[str, int | None], ...]:
    """The memory-backed emptyDirs (`medium: Memory`) the pod's container mounts, each a tmpfs of its
    `sizeLimit` (unbounded where none is set), as the kubelet mounts them: a pod's /dev/shm holds only what
    its spec sizes, so a python model that needs more fails here as it would in a cluster."""
    sizes = {
        volume["name"]: volume["emptyDir"].get("sizeLimit")
        for volume in pod["spec"].get("volumes") or []
        if (volume.get("emptyDir") or {}).get("medium") == "Memory"
    }
    container = pod["spec"]["containers"][0]
    return tuple(
        (mount["mountPath"], int(parse_quantity(sizes[mount["name"]])) if sizes[mount["name"]] else None)
        for mount in container.get("volumeMounts") or []
        if mount["name"] in sizes
    )


# What a node declares: pods share this machine's cores and memory whatever it says, so it says enough for a
# few Triton pods (a TritonServer's pod asks for a core) beside the operator's.
CAPACITY = {"cpu": "16", "memory": "64Gi", "pods": "110"}


def capacity_of(gpus: int) -> dict[str, str]:
    return {**CAPACITY, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}


async def register(api: ApiClient, site: NodeSite, capacity: Mapping[str, str]) -> None:
    """The Node, Ready with its capacity; returns once the controller-manager gave it a podCIDR."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": site.node,
            "labels": {"kubernetes.io/hostname": site.node, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
        },
    }
    with contextlib.suppress(ApiError):  # there already: a node restarted
        await api.request("POST", "/api/v1/nodes", node)
    await write_status(api, site, capacity)
    while not site.pod_cidr:
        found = await api.request("GET", f"/api/v1/nodes/{site.node}")
        site.pod_cidr = found.get("spec", {}).get("podCIDR", "")
        if not site.pod_cidr:
            await asyncio.sleep(0.2)  # the controller-manager's allocation, polled on the API server


async def write_status(api: ApiClient, site: NodeSite, capacity: Mapping[str, str]) -> None:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def condition(kind: str, status: str, reason: str) -> dict[str, str]:
        return {"type": kind, "status": status, "reason": reason, "lastHeartbeatTime": now, "lastTransitionTime": now}

    status = {
        "capacity": dict(capacity),
        "allocatable": dict(capacity),
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID"),
            condition("Ready", "True", "KubeletReady"),
        ],
        "addresses": [{"type": "InternalIP", "address": site.host_ip}, {"type": "Hostname", "address": site.node}],
        "nodeInfo": {
            "machineID": site.node, "systemUUID": site.node, "bootID": site.node, "kernelVersion": os.uname().release,
            "osImage": "process kubelet (tests/support/controlplane)", "containerRuntimeVersion": "processes://",
            "kubeletVersion": KUBERNETES_VERSION, "kubeProxyVersion": KUBERNETES_VERSION,
            "operatingSystem": "linux", "architecture": "amd64",
        },
    }  # fmt: skip
    await api.request("PATCH", f"/api/v1/nodes/{site.node}/status", {"status": status}, MERGE_PATCH)


async def keep_alive(api: ApiClient, site: NodeSite, capacity: Mapping[str, str]) -> None:
    """Every RENEW_SECONDS: the node's Lease renewed and its status (Ready) written again, as the kubelet
    does; a node the node-lifecycle controller marked Unknown (its heartbeat went stale while the API
    server was away, say) is Ready again at the next."""
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    name = site.node
    while True:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now},
        }
        try:
            try:
                await api.request("PATCH", f"{path}/{name}", {"spec": lease["spec"]}, MERGE_PATCH)
            except ApiError as error:
                if error.status != 404:
                    raise
                await api.request("POST", path, lease)
            await write_status(api, site, capacity)
        except (aiohttp.ClientError, OSError):
            pass  # the API server is away: renewed at the next period, the pods run on meanwhile
        except ApiError as error:
            if error.status not in PASSING_REFUSALS:
                raise
        await asyncio.sleep(RENEW_SECONDS)


def tls_context(ca: str, certificate: str, key: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca)
    context.load_cert_chain(certificate, key)
    return context


async def run(arguments: argparse.Namespace) -> None:
    network = ClusterNetwork(arguments.network)
    opened = asyncio.Event()
    tls = tls_context(arguments.ca, arguments.certificate, arguments.key)
    api = ApiClient(arguments.server, None, opened, tls)
    service = await api.request("GET", "/api/v1/namespaces/default/services/kubernetes")
    site = NodeSite(arguments.name, network, api, service["spec"]["clusterIP"], Path(arguments.workdir))
    capacity = capacity_of(arguments.gpus)
    await register(api, site, capacity)
    kubelet = Kubelet(api, Path(arguments.workdir), arguments.probe_seconds, site)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sign in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sign, stopping.set)
    tasks = [asyncio.create_task(keep_alive(api, site, capacity)), asyncio.create_task(kubelet.run())]
    stopped = asyncio.create_task(stopping.wait())
    done, _ = await asyncio.wait([*tasks, stopped], return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await kubelet.shutdown()
    await api.close()
    print(f"node {site.node} stopped; failures: {kubelet.failures}", flush=True)
    for task in done - {stopped}:
        task.result()  # a part that ended on its own: its error, in the node's log


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.controlplane.node")
    parser.add_argument("--name", required=True)
    parser.add_argument("--server", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--certificate", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--network", type=int, required=True, help="the cluster network's index")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--probe-seconds", type=float, default=1.0)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
