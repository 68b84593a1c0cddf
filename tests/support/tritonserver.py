"""A real tritonserver from the nvidia-pytriton wheel, started in its own process group for a test."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytriton

TRITON_DIR = Path(pytriton.__file__).parent / "tritonserver"


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


@contextlib.contextmanager
def running_tritonserver(args: list[str], http_port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Start tritonserver with `args`, wait until it is live, and end its whole process group."""
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(TRITON_DIR / "bin/tritonserver"), *args, f"--backend-directory={TRITON_DIR / 'backends'}"],
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"tritonserver exited {process.returncode}: {log.read_text()[-2000:]}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/live", timeout=1):
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(log.read_text()[-2000:])
            time.sleep(0.1)
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
