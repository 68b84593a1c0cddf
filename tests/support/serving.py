"""Serving while things change: the add model on real tritonserver pods, inference calls to it, a
client loop that counts failures, what "ready" means in its TritonModel's status, and a stream of
the ticker model read to its end."""

from __future__ import annotations

import asyncio
import copy
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support.models import TICKER_CONFIG
from tests.support.operator import Cluster, Pods
from tests.support.resources import FILES, MODEL, SERVER
from triton_operator.local.tritonserver import LocalTriton
from triton_operator.protocol.names import GRPC_CONTROL_METADATA, REVISION_PARAMETER

CALL_SECONDS = 60  # one request or read: far past what one takes, its server hangs


def infer(url: str, name: str = "add", client: grpcclient.InferenceServerClient | None = None) -> list[float]:
    """The add model's answer to ones, on a channel of its own, or on `client`'s kept one."""
    channel = client or grpcclient.InferenceServerClient(url)
    try:
        inputs = [grpcclient.InferInput("A", [1, 4], "FP32"), grpcclient.InferInput("B", [1, 4], "FP32")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
        return channel.infer(name, inputs, client_timeout=CALL_SECONDS).as_numpy("SUM")[0].tolist()
    finally:
        if client is None:
            channel.close()


class RequestLoop:
    """Clients sending requests to every pod while something changes; counts what failed. Each request
    on a channel of its own, or (`kept`) each client on one channel it keeps, as a gRPC client does."""

    def __init__(self, urls: list[str], model: str = "add", kept: bool = False):
        self.urls, self.model, self.kept = urls, model, kept
        self.stop = threading.Event()
        self.sent = 0
        self.failures: list[str] = []
        self.answered_by: Counter[str] = Counter()  # url -> requests it answered
        self.failed_by: Counter[str] = Counter()  # url -> requests that failed there
        self.threads = [threading.Thread(target=self._run, args=(url,)) for url in urls]

    def _run(self, url: str) -> None:
        client = grpcclient.InferenceServerClient(url) if self.kept else None
        try:
            for _ in range(100_000):  # bounded; stopped long before
                if self.stop.is_set():
                    return
                try:
                    infer(url, self.model, client)
                    self.sent += 1
                    self.answered_by[url] += 1
                except Exception as error:  # every failure is what the test counts
                    self.failures.append(str(error))
                    self.failed_by[url] += 1
        finally:
            if client is not None:
                client.close()

    def __enter__(self) -> RequestLoop:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(CALL_SECONDS)
            assert not thread.is_alive(), f"a request loop still ran {CALL_SECONDS} s after it was stopped"


def model_ready_at(cluster: Cluster, revision_not: str | None = None) -> dict[str, Any] | None:
    model = cluster.get("TritonModel", "add") or {}
    status = model.get("status") or {}
    ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
    if ready.get("status") == "True" and status.get("replicas") == "2/2" and status.get("configHash") != revision_not:
        return status
    return None


def answers_with(url: str, expected: list[float]) -> bool:
    try:
        return infer(url) == expected
    except Exception:
        return False


async def add_pod(cluster: Cluster, pods: Pods, name: str, key: str, **spec: Any) -> None:
    """A tritonserver started with `key` (and the flags a TritonServer of these spec fields renders), added as a pod of
    the server `triton`."""
    triton = await asyncio.to_thread(pods.start, name, key, **spec)
    await cluster.add_pod("triton", name, triton.address, triton.ports.grpc)


async def serve_add_model(
    cluster: Cluster,
    pods: Pods,
    names: tuple[str, ...],
    key: str | None = None,
    files: dict[str, Any] = FILES,
    **spec: Any,
) -> str:
    """The server `triton` with a replica for each of `names` and these spec fields, the add model and
    its `files`, and those pods started with `key` (default: the key the operator made) and the flags
    the spec renders; the key the operator made."""
    server = copy.deepcopy(SERVER)
    server["spec"] |= {"replicas": len(names), **spec}
    for obj in (server, files, MODEL):
        await cluster.create(copy.deepcopy(obj))
    made = await cluster.wait("the control key", lambda: cluster.control_key("triton"))
    for name in names:
        await add_pod(cluster, pods, name, key or made, **spec)
    return made


def revision_of(client: grpcclient.InferenceServerClient, name: str = "add", key: str | None = None) -> str:
    """The revision of the model a server serves, from its config as Triton holds it ("" when it has none);
    `key`: the server's control key, which model configs answer to."""
    try:
        headers = {GRPC_CONTROL_METADATA: key} if key else None
        config = client.get_model_config(name, headers=headers, client_timeout=CALL_SECONDS).config
        return config.parameters[REVISION_PARAMETER].string_value
    except InferenceServerException:
        return ""


def revision_on(triton: LocalTriton, name: str = "add") -> str:
    """revision_of, through a client of its own, with the server's key."""
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    try:
        return revision_of(client, name, triton.control_key)
    finally:
        client.close()


@dataclass(frozen=True)
class Streamed:
    ticks: list[int]  # as they came
    errors: list[str]  # an error ends the stream
    seconds: float  # from the request to its final response or its error


def stream_ticks(client: grpcclient.InferenceServerClient, model: str, ticks: int, period_ms: int) -> Streamed:
    """One request to the ticker model on a stream of `client`'s channel, read to its final response."""
    events: queue.Queue[tuple[Any, Any]] = queue.Queue()
    came: list[int] = []
    errors: list[str] = []
    started = time.monotonic()
    inputs = [grpcclient.InferInput(i["name"], [1], "INT32") for i in TICKER_CONFIG["input"]]
    for tensor, value in zip(inputs, (ticks, period_ms), strict=False):
        tensor.set_data_from_numpy(np.array([value], np.int32))
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    try:
        client.async_stream_infer(model, inputs, enable_empty_final_response=True)
        while True:
            result, error = events.get(timeout=ticks * period_ms / 1000 + 60)
            if error is not None:
                errors.append(str(error))
                break
            response = result.get_response()
            if response.outputs:
                came.append(int(result.as_numpy("TICK")[0]))
            if response.parameters["triton_final_response"].bool_param:
                break
    finally:
        seconds = time.monotonic() - started
        client.stop_stream()
    return Streamed(came, errors, seconds)
