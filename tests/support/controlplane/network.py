"""The cluster's network, made of what this machine's kernel has (bridges, veth pairs, network
namespaces; no dummy interfaces, no iptables rules): one bridge per cluster, its address the one
host address the cluster's components serve on, and each pod in a network namespace of its own.

- Cluster k (the first free of 0..39: a bridge `tkc<k>` that does not exist yet) takes the pod range
  10.(200+k).0.0/16 and the Service range 10.(160+k).0.0/24. The bridge holds 10.(200+k).255.254/16:
  the API server binds it (pods reach it, and the host does), and each Service's ClusterIP is added
  to it as a /32 so that the Service proxy can listen there (kube-proxy's job, done in user space).
- A pod gets a namespace `tkp<k>-<n>`, a veth pair (host end on the bridge), an address from its
  node's podCIDR (the controller-manager's allocation), a MAC derived from that address (mac_of)
  and a default route via the bridge: pods
  reach each other, the API server and every ClusterIP; the host reaches each pod at its address.
- Nothing leaves the machine: the ranges are routed only onto the bridge, forwarding stays off.

Everything made is removed by `remove()` (and a pod's part by `Sandbox.remove()`).
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import shutil
import subprocess
from dataclasses import dataclass

CLUSTERS = 40


def can_make_networks() -> bool:
    """Bridges and network namespaces need root, and `ip` and `unshare` to make and enter them."""
    return os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("unshare") is not None


class NetworkError(RuntimeError):
    pass


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def mac_of(address: str) -> str:
    """A MAC derived from an address (0a:58 and the address's four bytes, as OVN-Kubernetes gives pods): a pod
    given the address of one gone has the same MAC, so the host's and other pods' ARP entries for it stay
    right (with a random one they point at the gone pod until they fail, and the new pod is unreachable)."""
    return "0a:58:" + ":".join(f"{byte:02x}" for byte in ipaddress.ip_address(address).packed)


@dataclass(frozen=True)
class Sandbox:
    """A pod's network: its namespace, its address, and the command prefix that runs a process in it."""

    namespace: str
    address: str
    host_end: str

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace]

    def remove(self) -> None:
        ip("link", "del", self.host_end, check=False)  # its peer in the namespace goes with it
        ip("netns", "del", self.namespace, check=False)


class ClusterNetwork:
    def __init__(self, index: int):
        self.index = index
        self.bridge = f"tkc{index}"
        self.pod_range = ipaddress.ip_network(f"10.{200 + index}.0.0/16")
        self.service_range = ipaddress.ip_network(f"10.{160 + index}.0.0/24")
        self.host_address = f"10.{200 + index}.255.254"
        self._pods = itertools.count(1)

    @classmethod
    def create(cls) -> ClusterNetwork:
        """The first cluster index whose bridge can be made (another test run may hold the others)."""
        for index in range(CLUSTERS):
            network = cls(index)
            if ip("link", "add", network.bridge, "type", "bridge", check=False).returncode == 0:
                try:
                    # Its own MAC: else it takes its lowest port's, and each change flushes its ARP entries.
                    ip("link", "set", network.bridge, "address", mac_of(network.host_address))
                    ip("addr", "add", f"{network.host_address}/{network.pod_range.prefixlen}", "dev", network.bridge)
                    ip("link", "set", network.bridge, "up")
                except NetworkError:
                    network.remove()
                    raise
                return network
        raise NetworkError(f"no free cluster network: bridges tkc0..tkc{CLUSTERS - 1} all exist")

    def sandbox(self, pod_cidr: str, taken: set[str], label: str) -> Sandbox:
        """A new pod network namespace with an address of `pod_cidr` not in `taken`; `label` tells the
        nodes' names apart (each node process counts its own pods)."""
        number = next(self._pods)
        suffix = f"{self.index}{label}-{number}"  # interface names hold at most 15 characters
        namespace, host_end, pod_end = f"tkp{suffix}", f"tkh{suffix}", f"tkn{suffix}"
        hosts = ipaddress.ip_network(pod_cidr).hosts()
        address = next(str(a) for a in hosts if str(a) not in taken and str(a) != self.host_address)
        ip("netns", "add", namespace)
        sandbox = Sandbox(namespace, address, host_end)
        try:
            ip("link", "add", host_end, "type", "veth", "peer", "name", pod_end)
            ip("link", "set", pod_end, "netns", namespace)
            ip("link", "set", host_end, "master", self.bridge)
            ip("link", "set", host_end, "up")
            inside = ["netns", "exec", namespace, "ip"]
            ip(*inside, "link", "set", "lo", "up")
            ip(*inside, "link", "set", pod_end, "name", "eth0")
            ip(*inside, "link", "set", "eth0", "address", mac_of(address))
            ip(*inside, "addr", "add", f"{address}/{self.pod_range.prefixlen}", "dev", "eth0")
            ip(*inside, "link", "set", "eth0", "up")
            ip(*inside, "route", "add", "default", "via", self.host_address)
        except NetworkError:
            sandbox.remove()
            raise
        return sandbox

    def add_service_address(self, address: str) -> None:
        ip("addr", "replace", f"{address}/32", "dev", self.bridge)  # replace: there already is no error

    def remove(self) -> None:
        """The bridge (its addresses with it) and every pod namespace of this cluster left behind."""
        listed = ip("netns", "list", check=False).stdout.split()
        for name in listed:
            if name.startswith(f"tkp{self.index}") and name[len(f"tkp{self.index}")].isalpha():
                ip("netns", "del", name, check=False)
        ip("link", "del", self.bridge, check=False)
