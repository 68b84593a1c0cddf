"""Services as kube-proxy serves them, small: a TCP proxy per Service port. The rules kept, each
standing for the real one's:

- A Service port is reached at 127.0.0.1 on a port the kernel picks (bound to port 0, so nothing
  can take it between the pick and the use); `address(service, port)` says where.
- Its endpoints are the pods its selector matches that are Ready and not terminating (the
  EndpointSlice controller's ready endpoints), on the pod's port its targetPort names or numbers.
- Endpoints change asynchronously: each change is applied `propagation_seconds` after the Service
  watch saw it (the EndpointSlice controller and kube-proxy's own sync, both after the fact).
- Balancing is per connection: each new connection goes to the next endpoint (round robin) and
  stays on that pod until either side closes it, whatever the endpoints become meanwhile.
- With no endpoint, a new connection is closed at once (kube-proxy rejects it: a refusal).
- Left out: session affinity, NodePorts and load balancers, changes to a Service already served
  (its selector and ports are read once, when it appears).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .client import PODS, SERVICES, ApiClient
from .controller import is_ready, is_terminating


@dataclass(frozen=True)
class Endpoint:
    pod: str
    address: str
    port: int


@dataclass(frozen=True)
class EndpointChange:
    """The endpoints of one Service port: when the watch showed them, and when the proxy took them."""

    seen: float  # time.monotonic()
    applied: float
    service: str
    port: str
    pods: tuple[str, ...]


@dataclass(frozen=True)
class Connection:
    """A new connection to a Service port, and the pod it went to ("" when it had no endpoint)."""

    at: float  # time.monotonic()
    service: str
    port: str
    pod: str


class PortProxy:
    """One Service port: a listening socket, its endpoints, and the connections it carries."""

    def __init__(self, services: Services, service: str, port: Mapping[str, Any]):
        self.services = services
        self.service = service
        self.name = str(port.get("name") or port["port"])
        self.target = port.get("targetPort", port["port"])
        self.endpoints: list[Endpoint] = []
        self.turn = itertools.count()
        self.server: asyncio.Server | None = None
        self.carried: set[asyncio.Task[None]] = set()

    async def open(self) -> str:
        self.server = await asyncio.start_server(self._carry, "127.0.0.1", 0)
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    def endpoints_of(self, pods: list[dict[str, Any]]) -> list[Endpoint]:
        endpoints = []
        for pod in pods:
            ports = [p for c in pod["spec"]["containers"] for p in c.get("ports") or []]
            port = (
                self.target
                if isinstance(self.target, int)
                else next((p["containerPort"] for p in ports if p.get("name") == self.target), None)
            )
            if port is not None:
                endpoints.append(Endpoint(pod["metadata"]["name"], pod["status"]["podIP"], port))
        return sorted(endpoints, key=lambda endpoint: endpoint.pod)

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.carried.add(task)
        try:
            endpoint = self.endpoints[next(self.turn) % len(self.endpoints)] if self.endpoints else None
            self.services.connections.append(
                Connection(time.monotonic(), self.service, self.name, endpoint.pod if endpoint else "")
            )
            if endpoint is not None:
                await relay(reader, writer, endpoint.address, endpoint.port)
        finally:
            writer.close()
            self.carried.discard(task)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.carried):
            task.cancel()
        await asyncio.gather(*self.carried, return_exceptions=True)


async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str, port: int) -> None:
    """A client's connection carried to address:port and back until both sides end; refused there, the
    client sees its connection closed."""
    try:
        upstream_reader, upstream_writer = await asyncio.open_connection(address, port)
    except OSError:
        return
    try:
        await asyncio.gather(pipe(reader, upstream_writer, writer), pipe(upstream_reader, writer, upstream_writer))
    finally:
        upstream_writer.close()  # what is still buffered is sent first


async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter, source_writer: asyncio.StreamWriter) -> None:
    """Bytes one way until the source ends, passed on as an end of sending (the other way may go on);
    a side that fails (a reset) ends the connection both ways."""
    try:
        while data := await source.read(1 << 16):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except OSError:
        sink.transport.abort()
        source_writer.transport.abort()


class Services:
    """Every Service of the namespace, proxied; `changes` and `connections` are its log."""

    WATCHED = (SERVICES, PODS)

    def __init__(self, api: ApiClient, propagation_seconds: float):
        self.api = api
        self.propagation_seconds = propagation_seconds
        self.pods: dict[str, dict[str, Any]] = {}  # by uid
        self.selectors: dict[str, dict[str, str]] = {}  # Service name -> its selector
        self.proxies: dict[str, dict[str, PortProxy]] = {}  # Service name -> port name -> proxy
        self.addresses: dict[tuple[str, str], str] = {}  # (Service, port name) -> host:port
        self.opened = asyncio.Event()  # set at each Service opened, for `address`
        self.latest: dict[tuple[str, str], list[Endpoint]] = {}  # as last seen, maybe not yet applied
        self.changes: list[EndpointChange] = []
        self.connections: list[Connection] = []

    async def run(self) -> None:
        watches = [
            asyncio.create_task(self.api.follow(SERVICES, self._service_seen)),
            asyncio.create_task(self.api.follow(PODS, self._pod_seen)),
        ]
        try:
            await asyncio.gather(*watches)
        finally:
            for watch in watches:
                watch.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
            for proxies in self.proxies.values():
                for proxy in proxies.values():
                    await proxy.close()

    async def address(self, service: str, port: str) -> str:
        """Where the Service's port is reached (host:port), once the Service exists."""
        while (service, port) not in self.addresses:
            self.opened.clear()
            await self.opened.wait()
        return self.addresses[(service, port)]

    def _service_seen(self, kind: str, service: dict[str, Any]) -> None:
        name = service["metadata"]["name"]
        if kind == "DELETED":
            self.selectors.pop(name, None)
            for proxy in self.proxies.pop(name, {}).values():
                asyncio.get_running_loop().create_task(proxy.close())
        elif name not in self.proxies:
            self.selectors[name] = service["spec"].get("selector") or {}
            self.proxies[name] = {}
            asyncio.get_running_loop().create_task(self._open(name, service["spec"]["ports"]))

    async def _open(self, service: str, ports: list[dict[str, Any]]) -> None:
        proxies = self.proxies[service]
        for port in ports:
            proxy = PortProxy(self, service, port)
            self.addresses[(service, proxy.name)] = await proxy.open()
            proxies[proxy.name] = proxy
        self._endpoints_changed()
        self.opened.set()

    def _pod_seen(self, kind: str, pod: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.pods.pop(pod["metadata"]["uid"], None)
        else:
            self.pods[pod["metadata"]["uid"]] = pod
        self._endpoints_changed()

    def _endpoints_changed(self) -> None:
        """Each Service port whose endpoints the watch now shows otherwise gets them after the delay."""
        seen = time.monotonic()
        loop = asyncio.get_running_loop()
        for service, proxies in self.proxies.items():
            selector = self.selectors[service]
            serving = [
                pod
                for pod in self.pods.values()
                if selector
                and selector.items() <= (pod["metadata"].get("labels") or {}).items()
                and is_ready(pod)
                and not is_terminating(pod)
            ]
            for name, proxy in proxies.items():
                endpoints = proxy.endpoints_of(serving)
                if self.latest.get((service, name)) != endpoints:
                    self.latest[(service, name)] = endpoints
                    loop.call_later(self.propagation_seconds, self._apply, proxy, endpoints, seen)

    def _apply(self, proxy: PortProxy, endpoints: list[Endpoint], seen: float) -> None:
        proxy.endpoints = endpoints
        self.changes.append(
            EndpointChange(seen, time.monotonic(), proxy.service, proxy.name, tuple(e.pod for e in endpoints))
        )
