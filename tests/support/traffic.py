"""Clients of every kind sending through a Service while the server behind it changes (scales, rolls
every pod, reloads a model), each counting what failed; and the drained server they send to.

The clients (each a thread sending as fast as answers come, bounded in count and time):
- gRPC on one kept channel (tritonclient.grpc): it stays on one pod until the server's max
  connection age recycles it;
- a gRPC stream of a decoupled model, one after another on a kept channel, each longer than several
  connection ages: it must arrive whole, through recycled connections and pods that leave;
- HTTP keep-alive (one persistent connection): at a pod's exit timeout its connection is cut, and
  at most the request in flight then fails;
- HTTP with a new connection per request.
"""

from __future__ import annotations

import copy
import http.client
import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from tests.support.models import TICKER_CODE, TICKER_CONFIG
from tests.support.resources import MODEL, SERVER, python_model_documents
from tests.support.serving import stream_ticks

AGE_MS = 2000  # measured: kept channels recycle with no failed request
# Each stream runs three connection ages; the grace (unset) follows maxRequestSeconds and covers it.
STREAM_TICKS, STREAM_PERIOD_MS = 12, 500
MAX_REQUEST_SECONDS = 7
STREAM = "grpc-stream"
EXIT_TIMEOUT = 3
INFER_BODY = json.dumps(
    {"inputs": [{"name": name, "shape": [1, 4], "datatype": "FP32", "data": [1.0] * 4} for name in ("A", "B")]}
).encode()


def drained_server(pre_stop_seconds: int | None = None) -> dict[str, Any]:
    server = copy.deepcopy(SERVER)
    server["spec"].update(
        replicas=2,
        exitTimeoutSeconds=EXIT_TIMEOUT,
        grpc={"maxConnectionAgeMs": AGE_MS},
        drain={
            "endpointsPropagationSeconds": 1,
            "maxRequestSeconds": MAX_REQUEST_SECONDS,
            **({"preStopSeconds": pre_stop_seconds} if pre_stop_seconds is not None else {}),
        },
    )
    return server


class Client(threading.Thread):
    """Sends requests until stopped (or 200,000 of them), counting answers and failures."""

    def __init__(self, kind: str, send: Any):
        super().__init__(name=kind)
        self.kind, self.send = kind, send
        self.stop = threading.Event()
        self.sent = 0
        self.failures: list[str] = []

    def run(self) -> None:
        for _ in range(200_000):
            if self.stop.is_set():
                return
            try:
                self.send()
                self.sent += 1
            except Exception as error:  # every failure is what the test counts
                self.failures.append(f"{type(error).__name__}: {error}"[:200])
                time.sleep(0.005)


KEPT_CHANNELS = 4  # each recycled on its own: a new pod's first gRPC request comes sooner than on one channel


def http_model() -> dict[str, Any]:
    """The same model under another name for the HTTP clients, so Triton's statistics of `add` count
    the kept gRPC channels' requests alone."""
    model = copy.deepcopy(MODEL)
    model["metadata"]["name"] = "add-http"
    model["spec"]["modelName"] = "add_http"
    return model


def ticker_model() -> list[dict[str, Any]]:
    """The decoupled ticker model and its files."""
    return python_model_documents("ticker", TICKER_CONFIG, TICKER_CODE)


@contextmanager
def clients(grpc_address: str, http_address: str) -> Iterator[dict[str, list[Client]]]:
    """The three kinds of client, started; stopped and joined at the end."""
    host, port = http_address.rsplit(":", 1)
    with ExitStack() as stack:
        kinds: dict[str, list[Client]] = {"grpc": [], STREAM: [], "http-keep-alive": [], "http-new": []}
        for _ in range(KEPT_CHANNELS):
            channel = grpcclient.InferenceServerClient(grpc_address)
            stack.callback(channel.close)
            inputs = [grpcclient.InferInput(name, [1, 4], "FP32") for name in ("A", "B")]
            for tensor in inputs:
                tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
            kinds["grpc"].append(Client("grpc", lambda channel=channel, inputs=inputs: channel.infer("add", inputs)))
        streams = grpcclient.InferenceServerClient(grpc_address)
        stack.callback(streams.close)

        def whole_stream() -> None:
            result = stream_ticks(streams, "ticker", STREAM_TICKS, STREAM_PERIOD_MS)
            assert result.errors == [] and result.ticks == list(range(STREAM_TICKS)), result

        kinds[STREAM].append(Client(STREAM, whole_stream))
        kept = http.client.HTTPConnection(host, int(port), timeout=30)
        stack.callback(kept.close)

        def http_keep_alive() -> None:
            try:
                kept.request("POST", "/v2/models/add_http/infer", INFER_BODY, {"Content-Type": "application/json"})
                response = kept.getresponse()
                body = response.read()
            except Exception:
                kept.close()  # the next request opens a connection anew, as a client's retry would
                raise
            assert response.status == 200, body[:200]

        def http_new_connection() -> None:
            fresh = http.client.HTTPConnection(host, int(port), timeout=30)
            try:
                fresh.request(
                    "POST",
                    "/v2/models/add_http/infer",
                    INFER_BODY,
                    {"Content-Type": "application/json", "Connection": "close"},
                )
                response = fresh.getresponse()
                body = response.read()
            finally:
                fresh.close()
            assert response.status == 200, body[:200]

        kinds["http-keep-alive"].append(Client("http-keep-alive", http_keep_alive))
        kinds["http-new"].append(Client("http-new", http_new_connection))
        every = [client for group in kinds.values() for client in group]
        for client in every:
            client.start()
        try:
            yield kinds
        finally:
            for client in every:
                client.stop.set()
            for client in every:
                client.join()


def failures(kinds: dict[str, list[Client]]) -> dict[str, int]:
    return {kind: sum(len(client.failures) for client in group) for kind, group in kinds.items()}


def sent(kinds: dict[str, list[Client]]) -> dict[str, int]:
    return {kind: sum(client.sent for client in group) for kind, group in kinds.items()}
