"""Failed requests and worst client latency while a model's config changes under a steady request
loop (an HTTP client and a gRPC client, each asking every 10 ms), three ways of changing it:

- ours: the gRPC control API's load with the new config, in place (what the sync does);
- unload, then load;
- Triton's HTTP load call with the new config, in place.

Each change is preceded by a quiet window of the same loops, which gives the loop's normal latency.
Goal on our path: 0 failures and a worst latency under 50 ms above the loop's normal (median).

    .venv/bin/python bench/change_under_load.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from common import SCALED, file_overrides, load, ports, print_table, scaled_model

from triton_operator.api.server import TritonServerSpec
from triton_operator.local.tritonserver import LocalTriton
from triton_operator.triton.client import ControlClient

INTERVAL_SECONDS = 0.01
CALL_SECONDS = 60  # the most a request or a load call may take: far past what one takes, Triton hangs
QUIET_SECONDS = 1.5
AFTER_SECONDS = 0.5  # the loops go on this long after the change returned
GOAL_ABOVE_NORMAL_SECONDS = 0.05


@dataclass
class Window:
    latencies: list[float] = field(default_factory=list)
    failures: int = 0


class RequestLoop:
    """One client asking every INTERVAL_SECONDS on its own thread; `window` collects what it sees."""

    def __init__(self, infer: Callable[[], object]):
        self.infer = infer
        self.window = Window()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        next_at = time.perf_counter()
        while not self.stop.is_set():
            started = time.perf_counter()
            try:
                self.infer()
                self.window.latencies.append(time.perf_counter() - started)
            except Exception:  # every failure counts, whatever its kind
                self.window.failures += 1
            next_at += INTERVAL_SECONDS
            self.stop.wait(max(next_at - time.perf_counter(), 0))

    def take(self) -> Window:
        window, self.window = self.window, Window()
        return window


def loops(triton: LocalTriton) -> dict[str, RequestLoop]:
    data = np.ones(4, np.float32)
    grpc, http = (
        grpcclient.InferenceServerClient(triton.grpc_url),
        httpclient.InferenceServerClient(triton.http_url.removeprefix("http://"), network_timeout=CALL_SECONDS),
    )
    grpc_input, http_input = grpcclient.InferInput("IN", [4], "FP32"), httpclient.InferInput("IN", [4], "FP32")
    grpc_input.set_data_from_numpy(data)
    http_input.set_data_from_numpy(data)
    return {
        "HTTP client": RequestLoop(lambda: http.infer(SCALED, [http_input])),
        "gRPC client": RequestLoop(lambda: grpc.infer(SCALED, [grpc_input], client_timeout=CALL_SECONDS)),
    }


def our_load(triton: LocalTriton, factor: int) -> None:
    async def run() -> None:
        model = scaled_model(factor)
        async with ControlClient(triton.grpc_url) as client:
            await client.load(model)

    asyncio.run(run())


def unload_then_load(triton: LocalTriton, factor: int) -> None:
    model = scaled_model(factor)
    with grpcclient.InferenceServerClient(triton.grpc_url) as client:
        client.unload_model(SCALED, client_timeout=CALL_SECONDS)
        client.load_model(SCALED, config=model.config_json, files=file_overrides(model), client_timeout=CALL_SECONDS)


def http_load(triton: LocalTriton, factor: int) -> None:
    model = scaled_model(factor)
    client = httpclient.InferenceServerClient(triton.http_url.removeprefix("http://"), network_timeout=600)
    try:
        client.load_model(SCALED, config=model.config_json, files=file_overrides(model))
    finally:
        client.close()


PATHS: dict[str, Callable[[LocalTriton, int], None]] = {
    "ours: gRPC load with the config, in place": our_load,
    "unload, then load": unload_then_load,
    "HTTP load call with the config, in place": http_load,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    spec = TritonServerSpec.model_validate({"exitTimeoutSeconds": 5})
    results: dict[tuple[str, str], dict[str, list[float]]] = {}
    factor = 1
    with (
        tempfile.TemporaryDirectory(prefix="bench-change-under-load-") as workdir,
        LocalTriton(spec, Path(workdir), ports()) as triton,
    ):
        load(triton, scaled_model(factor))
        clients = loops(triton)
        for loop in clients.values():
            loop.thread.start()
        try:
            for _ in range(args.repeats):
                for path, change in PATHS.items():
                    factor += 1
                    for loop in clients.values():
                        loop.take()
                    time.sleep(QUIET_SECONDS)  # the quiet window: the loops' normal
                    quiet = {name: loop.take() for name, loop in clients.items()}
                    change(triton, factor)
                    time.sleep(AFTER_SECONDS)
                    during = {name: loop.take() for name, loop in clients.items()}
                    for name in clients:
                        figures = results.setdefault((path, name), {"failures": [], "worst": [], "normal": []})
                        figures["failures"].append(during[name].failures)
                        figures["worst"].append(max(during[name].latencies, default=float("inf")))
                        figures["normal"].append(statistics.median(quiet[name].latencies))
        finally:
            for loop in clients.values():
                loop.stop.set()
            for name, loop in clients.items():
                loop.thread.join(CALL_SECONDS)
                if loop.thread.is_alive():
                    raise TimeoutError(f"the {name}'s loop still ran {CALL_SECONDS} s after it was stopped")
    rows = []
    for (path, client), figures in results.items():
        normal, worst = statistics.median(figures["normal"]), statistics.median(figures["worst"])
        goal = ""
        if path.startswith("ours"):
            met = sum(figures["failures"]) == 0 and worst - normal < GOAL_ABOVE_NORMAL_SECONDS
            goal = f"0 failures, worst < normal + 50 ms: {'met' if met else 'missed'}"
        rows.append(
            [
                path,
                client,
                sum(figures["failures"]),
                f"{normal * 1000:.1f}",
                f"{worst * 1000:.0f}",
                f"{(worst - normal) * 1000:.0f}",
                goal,
            ]
        )
    print_table(
        [
            "change",
            "client",
            "failed requests (all repeats)",
            "normal ms (median, quiet)",
            "worst ms during change (median of repeats)",
            "worst above normal ms",
            "goal",
        ],
        rows,
    )
    print(f"\n{args.repeats} repeats of each path; the loops ask every {INTERVAL_SECONDS * 1000:.0f} ms")


if __name__ == "__main__":
    main()
