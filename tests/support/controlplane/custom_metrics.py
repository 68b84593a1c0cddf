"""A stand-in for Prometheus and prometheus-adapter: the custom metrics API (custom.metrics.k8s.io
v1beta2) the HPA controller reads, registered with the API server as an APIService and answering
Triton's queue time per pod, `triton_queue_microseconds_per_request`, by the chart's adapter rule:
over the last 30 s, delta(nv_inference_queue_duration_us) / (1 + delta(nv_inference_request_success)),
averaged over the pod's models. It reads each pod's Triton metrics port itself when asked (instead of
a Prometheus scraping them), keeping what it read for the window.

It serves on the cluster bridge's host address; the APIService points at a Service without a
selector whose EndpointSlice names that address (the API server routes to an APIService's endpoints).
Only the API server reaches it, and only through that route: TLS with a certificate of the cluster's
CA, and no check of the caller's, as prometheus-adapter's test installs do (insecureSkipTLSVerify).
"""

from __future__ import annotations

import asyncio
import datetime
import re
import ssl
import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from tests.support.ports import free_ports

from .node import tls_context

if TYPE_CHECKING:
    from . import ControlPlane

GROUP, VERSION = "custom.metrics.k8s.io", "v1beta2"
QUEUE_TIME = "triton_queue_microseconds_per_request"
WINDOW_SECONDS = 30.0
NAMESPACE = "custom-metrics"
METRICS_PORT = 8002  # Triton's metrics port on every pod the operator renders
SAMPLE = re.compile(r"^(nv_inference_queue_duration_us|nv_inference_request_success)(\{[^}]*\})? (\S+)$")

Counters = dict[tuple[str, str], float]  # (metric, series labels) -> value


def parse_counters(text: str) -> Counters:
    """The two counters the rule reads, per series, from Triton's Prometheus text."""
    counters: Counters = {}
    for line in text.splitlines():
        if match := SAMPLE.match(line):
            counters[(match[1], match[2] or "")] = float(match[3])
    return counters


def queue_time(then: Counters, now: Counters) -> float:
    """The rule's value between two readings of one pod: per series (model and version), the queue time
    added per request succeeded, averaged over the series (an idle one counts 0)."""
    series = {labels for metric, labels in now if metric == "nv_inference_queue_duration_us"}
    if not series:
        return 0.0
    values = []
    for labels in series:
        waited = now[("nv_inference_queue_duration_us", labels)] - then.get(
            ("nv_inference_queue_duration_us", labels), 0
        )
        done = now.get(("nv_inference_request_success", labels), 0) - then.get(
            ("nv_inference_request_success", labels), 0
        )
        values.append(waited / (1 + done))
    return sum(values) / len(values)


class CustomMetrics:
    """The API's two routes (discovery, and a metric of the pods a selector names), on a loop of its own."""

    def __init__(self, plane: ControlPlane):
        self.plane = plane
        self.readings: dict[str, deque[tuple[float, Counters]]] = defaultdict(deque)  # by pod IP
        self.asked: list[dict[str, str]] = []  # every metric request: what the HPA controller asked

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(f"/apis/{GROUP}/{VERSION}", self._discovery)
        app.router.add_get(f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/pods/{{name}}/{{metric}}", self._pods)
        return app

    async def _discovery(self, request: web.Request) -> web.Response:
        resource = {"name": f"pods/{QUEUE_TIME}", "singularName": "", "namespaced": True,
                    "kind": "MetricValueList", "verbs": ["get"]}  # fmt: skip
        listing = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{VERSION}",
                   "resources": [resource]}  # fmt: skip
        return web.json_response(listing)

    async def _pods(self, request: web.Request) -> web.Response:
        namespace, name, metric = (request.match_info[key] for key in ("namespace", "name", "metric"))
        self.asked.append({"namespace": namespace, "name": name, "metric": metric, **request.query})
        if metric != QUEUE_TIME:
            return web.json_response({"kind": "Status", "status": "Failure", "code": 404, "reason": "NotFound",
                                      "message": f"no metric {metric}"}, status=404)  # fmt: skip
        pods = await self._pods_of(namespace, request.query.get("labelSelector", ""))
        if name != "*":
            pods = [pod for pod in pods if pod["metadata"]["name"] == name]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        items = []
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            for pod in pods:
                address = pod["status"].get("podIP")
                if not address:
                    continue
                try:
                    async with session.get(f"http://{address}:{METRICS_PORT}/metrics") as response:
                        counters = parse_counters(await response.text())
                except (aiohttp.ClientError, TimeoutError):
                    continue  # a pod not answering has no value, as Prometheus would have none
                value = self._value(address, counters)
                items.append(
                    {
                        "describedObject": {"kind": "Pod", "namespace": namespace, "name": pod["metadata"]["name"],
                                            "apiVersion": "/v1"},
                        "metric": {"name": metric},
                        "timestamp": now,
                        "windowSeconds": int(WINDOW_SECONDS),
                        "value": f"{round(value)}",
                    }
                )  # fmt: skip
        return web.json_response({"kind": "MetricValueList", "apiVersion": f"{GROUP}/{VERSION}",
                                  "metadata": {}, "items": items})  # fmt: skip

    def _value(self, address: str, counters: Counters) -> float:
        """The rule's value from the oldest reading within the window to this one."""
        readings = self.readings[address]
        now = time.monotonic()
        readings.append((now, counters))
        while len(readings) > 1 and readings[1][0] <= now - WINDOW_SECONDS:
            readings.popleft()
        return queue_time(readings[0][1], counters) if len(readings) > 1 else 0.0

    async def _pods_of(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        plane = self.plane
        context = tls_context(str(plane.ca), str(plane.admin.certificate), str(plane.admin.key))
        async with aiohttp.ClientSession(base_url=plane.server, connector=aiohttp.TCPConnector(ssl=context)) as api:
            async with api.get(f"/api/v1/namespaces/{namespace}/pods", params={"labelSelector": selector}) as response:
                return (await response.json())["items"]  # type: ignore[no-any-return]


def registration(address: str, port: int) -> list[dict[str, Any]]:
    """The APIService and the selector-less Service and EndpointSlice it routes to (at `address`:`port`)."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "custom-metrics", "namespace": NAMESPACE},
         "spec": {"ports": [{"port": 443, "targetPort": port, "protocol": "TCP"}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": "custom-metrics", "namespace": NAMESPACE,
                      "labels": {"kubernetes.io/service-name": "custom-metrics"}},
         "addressType": "IPv4",
         "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
         "ports": [{"port": port, "protocol": "TCP", "name": ""}]},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": f"{VERSION}.{GROUP}"},
         "spec": {"group": GROUP, "version": VERSION, "insecureSkipTLSVerify": True,
                  "groupPriorityMinimum": 100, "versionPriority": 100,
                  "service": {"name": "custom-metrics", "namespace": NAMESPACE, "port": 443}}},
    ]  # fmt: skip


@contextmanager
def serving(plane: ControlPlane) -> Iterator[tuple[CustomMetrics, list[dict[str, Any]]]]:
    """The API served on the bridge's host address until the block ends; with the objects that
    register it, for the caller to apply."""
    metrics = CustomMetrics(plane)
    (port,) = free_ports(1)
    pair = plane.authority.issue("custom-metrics", "custom-metrics", addresses=(plane.address,))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(pair.certificate), str(pair.key))
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(metrics.app())
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, plane.address, port, ssl_context=context).start())
    thread = threading.Thread(target=loop.run_forever, name="custom-metrics", daemon=True)
    thread.start()
    try:
        yield metrics, registration(plane.address, port)
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
