"""Config change to new config serving, three ways, for one python model whose answer shows its
config (OUT = IN x its `factor` parameter):

- `local` mode: the model's YAML file saved -> the first response from the new config;
- Triton's own reload of the same change: the gRPC load call -> the first new response;
- the restart path other tools take: stop the server, start it, load the model -> the first new response.

A client asks in a loop meanwhile. Goals: local <= 1.2x Triton's reload + 50 ms; restart >= 10x local.

    .venv/bin/python bench/config_change.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import yaml
from common import ROOT, SCALED, SCALED_CODE, file_overrides, load, ports, print_table, scaled_config, scaled_model

from triton_operator.api.server import TritonServerSpec
from triton_operator.api.types import API_VERSION
from triton_operator.local.tritonserver import LocalTriton

SERVER_SPEC = {"backends": ["python"], "exitTimeoutSeconds": 5}
GOAL_SLACK_SECONDS = 0.05
# Bounds of the waits, each many times what it takes on a busy 2-core machine: past one, the run has failed.
ANSWER_SECONDS = 120  # a change (a restart included) to the first answer of the new config
LINE_SECONDS = 300  # local mode's next awaited line (its start: Triton's start and the first load)
CALL_SECONDS = 30  # one request


def write_crs(folder: Path, factor: int) -> None:
    """The server and the model as local mode reads them; the model's file is the one edited."""
    server = {"apiVersion": API_VERSION, "kind": "TritonServer", "metadata": {"name": "bench"}, "spec": SERVER_SPEC}
    files = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "scaled-files"},
        "data": {"model.py": SCALED_CODE},
    }
    model = {
        "apiVersion": API_VERSION,
        "kind": "TritonModel",
        "metadata": {"name": SCALED},
        "spec": {
            "serverRef": {"name": "bench"},
            "files": {"configMapRef": {"name": "scaled-files", "items": [{"key": "model.py", "path": "1/model.py"}]}},
            "config": scaled_config(factor),
        },
    }
    (folder / "server.yaml").write_text(yaml.safe_dump(server))
    (folder / "model.yaml").write_text(yaml.safe_dump_all([files, model]))


def until_answer(url: str, factor: int, change: Callable[[], None]) -> float:
    """Seconds from `change()` (run in a thread, as it may block until done) to the first response
    computed with `factor`; requests go one after another meanwhile."""
    client = grpcclient.InferenceServerClient(url)
    data = np.ones(4, np.float32)
    request = grpcclient.InferInput("IN", [4], "FP32")
    request.set_data_from_numpy(data)
    try:
        started = time.perf_counter()
        changer = threading.Thread(target=change)
        changer.start()
        deadline = started + ANSWER_SECONDS
        while time.perf_counter() < deadline:
            try:
                if client.infer(SCALED, [request], client_timeout=CALL_SECONDS).as_numpy("OUT")[0] == factor:
                    elapsed = time.perf_counter() - started
                    break
            except Exception:  # the server is restarting or the model reloading: ask again
                pass
        else:
            raise TimeoutError(f"no answer from factor {factor} within {ANSWER_SECONDS} s")
        changer.join(ANSWER_SECONDS)
        if changer.is_alive():
            raise TimeoutError(f"the change to factor {factor} still ran {ANSWER_SECONDS} s after it answered")
        return elapsed
    finally:
        client.close()


def local_mode(repeats: int, workdir: Path) -> list[float]:
    crs = workdir / "crs"
    crs.mkdir()
    write_crs(crs, factor=1)
    free = ports()
    command = [
        sys.executable,
        "-m",
        "triton_operator.cli",
        "local",
        str(crs),
        "--workdir",
        str(workdir / "local"),
        "--http-port",
        str(free.http),
        "--grpc-port",
        str(free.grpc),
        "--metrics-port",
        str(free.metrics),
    ]
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}  # this clone's local mode
    process = subprocess.Popen(
        command, cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()  # type: ignore[union-attr]

    def until_line(text: str) -> None:
        deadline = time.monotonic() + LINE_SECONDS
        while (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(queue.Empty):
                if text in lines.get(timeout=left):
                    return
        raise TimeoutError(f"local mode printed no {text!r} within {LINE_SECONDS} s (exit code {process.poll()})")

    try:
        until_line("watching the files")
        times = []
        for factor in range(2, repeats + 2):
            times.append(until_answer(f"127.0.0.1:{free.grpc}", factor, lambda: write_crs(crs, factor)))
            until_line(f"reload {SCALED}: done")
        return times
    finally:
        process.terminate()
        process.wait(timeout=60)


def tritons_reload_and_restart(repeats: int, workdir: Path) -> tuple[list[float], list[float]]:
    spec = TritonServerSpec.model_validate(SERVER_SPEC)
    reloads, restarts = [], []
    with LocalTriton(spec, workdir, ports()) as triton:
        load(triton, scaled_model(1))
        for factor in range(2, repeats + 2):
            model = scaled_model(factor)

            def reload() -> None:
                with grpcclient.InferenceServerClient(triton.grpc_url) as control:
                    control.load_model(SCALED, config=model.config_json, files=file_overrides(model))

            reloads.append(until_answer(triton.grpc_url, factor, reload))
        for factor in range(repeats + 2, 2 * repeats + 2):

            def restart() -> None:
                triton.stop()
                triton.start()
                load(triton, scaled_model(factor))

            restarts.append(until_answer(triton.grpc_url, factor, restart))
    return reloads, restarts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-config-change-") as tmp:
        (Path(tmp) / "local").mkdir()
        (Path(tmp) / "triton").mkdir()
        local = local_mode(args.repeats, Path(tmp))
        reload, restart = tritons_reload_and_restart(args.repeats, Path(tmp) / "triton")
    ours, raw, restarted = (statistics.median(times) for times in (local, reload, restart))
    allowed = 1.2 * raw + GOAL_SLACK_SECONDS
    print_table(
        ["path", "median ms", "vs Triton's reload", "goal"],
        [
            [
                "local mode: file saved -> first new response",
                f"{ours * 1000:.0f}",
                f"{ours / raw:.2f}x",
                f"<= 1.2x + 50 ms = {allowed * 1000:.0f} ms: {'met' if ours <= allowed else 'missed'}",
            ],
            ["Triton's own reload: load call -> first new response", f"{raw * 1000:.0f}", "1.00x", ""],
            [
                "restart: stop, start, load -> first new response",
                f"{restarted * 1000:.0f}",
                f"{restarted / raw:.2f}x",
                f">= 10x local ({restarted / ours:.1f}x): {'met' if restarted >= 10 * ours else 'missed'}",
            ],
        ],
    )
    print(
        f"\n{args.repeats} repeats each: local {[round(t * 1000) for t in local]} ms, "
        f"reload {[round(t * 1000) for t in reload]} ms, restart {[round(t * 1000) for t in restart]} ms"
    )


if __name__ == "__main__":
    main()
