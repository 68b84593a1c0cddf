"""Services for the built control plane, as kube-proxy serves them, in user space: a process that
follows every Service and EndpointSlice on the API server and, for each TCP port of a Service with a
ClusterIP, listens on ClusterIP:port (the address added to the cluster's bridge) and carries each new
connection to one of the port's ready endpoints, round robin. The rules kept:

- endpoints are the EndpointSlices' (the real endpointslice controller's, the API server's own for
  `kubernetes`): addresses whose `ready` condition is true, on the slice's port of the same name;
- balancing is per connection, which stays on its endpoint until either side closes it;
- with no ready endpoint a new connection is closed at once (kube-proxy rejects it).

Left out: NodePorts, load balancers, session affinity, UDP, and ports a Service changes after it
appears (a Service is opened when first seen, closed when deleted).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import signal
import sys
from typing import Any

from tests.support.minicluster.client import ApiClient
from tests.support.minicluster.service import relay

from .network import ClusterNetwork
from .node import tls_context

Key = tuple[str, str, str]  # namespace, Service, port name


class Proxy:
    def __init__(self, api: ApiClient, network: ClusterNetwork):
        self.api = api
        self.network = network
        self.servers: dict[Key, asyncio.Server] = {}
        self.slices: dict[str, dict[str, Any]] = {}  # by uid
        self.endpoints: dict[Key, list[tuple[str, int]]] = {}
        self.turn = itertools.count()

    async def run(self) -> None:
        await asyncio.gather(
            self.api.follow("/api/v1/services", self._service_seen),
            self.api.follow("/apis/discovery.k8s.io/v1/endpointslices", self._slice_seen),
        )

    def _service_seen(self, kind: str, service: dict[str, Any]) -> None:
        namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
        address = service["spec"].get("clusterIP")
        keys = [(namespace, name, str(port.get("name", ""))) for port in service["spec"].get("ports") or []]
        if kind == "DELETED":
            for key in keys:
                server = self.servers.pop(key, None)
                if server is not None:
                    server.close()
            return
        if not address or address == "None":
            return
        wanted = [
            (key, port["port"])
            for port, key in zip(service["spec"].get("ports") or [], keys, strict=True)
            if key not in self.servers and port.get("protocol", "TCP") == "TCP"
        ]
        if wanted:
            task = asyncio.get_running_loop().create_task(self._open(address, wanted))
            task.add_done_callback(_said)

    async def _open(self, address: str, ports: list[tuple[Key, int]]) -> None:
        """A Service's ports, each listening on its ClusterIP (added to the bridge once, first)."""
        await asyncio.to_thread(self.network.add_service_address, address)
        for key, port in ports:

            async def carry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: Key = key) -> None:
                await self._carry(key, reader, writer)

            self.servers[key] = await asyncio.start_server(carry, address, port)

    def _slice_seen(self, kind: str, endpoint_slice: dict[str, Any]) -> None:
        uid = endpoint_slice["metadata"]["uid"]
        if kind == "DELETED":
            self.slices.pop(uid, None)
        else:
            self.slices[uid] = endpoint_slice
        endpoints: dict[Key, list[tuple[str, int]]] = {}
        for found in self.slices.values():
            service = (found["metadata"].get("labels") or {}).get("kubernetes.io/service-name")
            if not service:
                continue
            ready = [
                address
                for endpoint in found.get("endpoints") or []
                if (endpoint.get("conditions") or {}).get("ready")
                for address in endpoint.get("addresses") or []
            ]
            for port in found.get("ports") or []:
                key = (found["metadata"]["namespace"], service, str(port.get("name", "")))
                endpoints.setdefault(key, []).extend((address, port["port"]) for address in ready)
        self.endpoints = endpoints

    async def _carry(self, key: Key, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if endpoints := self.endpoints.get(key):
                await relay(reader, writer, *endpoints[next(self.turn) % len(endpoints)])
        finally:
            writer.close()


def _said(task: asyncio.Task[None]) -> None:
    """A Service that could not be opened: said in the proxy's log at once."""
    if not task.cancelled() and task.exception() is not None:
        print(f"a Service was not opened: {task.exception()!r}", file=sys.stderr, flush=True)


async def run(arguments: argparse.Namespace) -> None:
    api = ApiClient(
        arguments.server, None, asyncio.Event(), tls_context(arguments.ca, arguments.certificate, arguments.key)
    )
    proxy = Proxy(api, ClusterNetwork(arguments.network))
    stopping = asyncio.Event()
    for sign in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sign, stopping.set)
    task = asyncio.create_task(proxy.run())
    stopped = asyncio.create_task(stopping.wait())
    await asyncio.wait([task, stopped], return_when=asyncio.FIRST_COMPLETED)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    for server in proxy.servers.values():
        server.close()
    await api.close()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.controlplane.proxy")
    for name in ("--server", "--ca", "--certificate", "--key"):
        parser.add_argument(name, required=True)
    parser.add_argument("--network", type=int, required=True)
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
