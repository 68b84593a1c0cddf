"""The cluster's network (tests/support/controlplane/network.py) as pods come and go: a pod given the
address of one gone is reached at once, from the host that reached the one before."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.controlplane.network import ClusterNetwork, Sandbox, can_make_networks

pytestmark = pytest.mark.skipif(
    not can_make_networks(), reason="NOT RUN: pods' network namespaces need root, `ip` and `unshare`"
)
# Accepts one connection on the sandbox's address, after saying so on stdout.
ACCEPT_ONE = """
import socket, sys
with socket.create_server((sys.argv[1], 0)) as server:
    print(server.getsockname()[1], flush=True)
    server.accept()[0].close()
"""


@pytest.fixture
def network() -> Iterator[ClusterNetwork]:
    network = ClusterNetwork.create()
    try:
        yield network
    finally:
        network.remove()


def connect_to(sandbox: Sandbox) -> None:
    """A TCP connection from the host to a listener in the sandbox, within 3 s (ARP included)."""
    listener = subprocess.Popen(
        [*sandbox.prefix, sys.executable, "-c", ACCEPT_ONE, sandbox.address], stdout=subprocess.PIPE, text=True
    )
    try:
        port = int(listener.stdout.readline())  # type: ignore[union-attr]
        socket.create_connection((sandbox.address, port), timeout=3).close()
        assert listener.wait(timeout=10) == 0
    finally:
        listener.kill()
        listener.wait()


def test_a_pod_given_a_gone_pods_address_is_reached_at_once(network: ClusterNetwork) -> None:
    pod_cidr = str(next(network.pod_range.subnets(new_prefix=24)))
    first = network.sandbox(pod_cidr, set(), "t")
    # Another pod keeps the bridge up: a bridge left without ports flushes its ARP entries.
    other = network.sandbox(pod_cidr, {first.address}, "t")
    try:
        connect_to(first)  # the host's ARP entry for the address now names the first pod
        first.remove()
        second = network.sandbox(pod_cidr, {other.address}, "t")
        try:
            assert second.address == first.address
            connect_to(second)
        finally:
            second.remove()
    finally:
        first.remove()
        other.remove()
