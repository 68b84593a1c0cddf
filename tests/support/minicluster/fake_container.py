"""A stand-in container for the mini cluster's own tests: an HTTP server on the pod's address that
answers which pod it is, up in a fraction of a second where a tritonserver takes seconds.

GET /name answers the pod's name ($POD_NAME), any other path 200 (the probes). On SIGTERM it exits
at once, so new connections are refused from then on, as Triton refuses new HTTP connections from
SIGTERM on; with --ignore-sigterm it prints the signal's arrival (`SIGTERM <monotonic time>`) and
keeps serving, so only the kubelet's SIGKILL ends it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PROGRAM = Path(__file__)
PORT = 8000


def container(*args: str) -> dict[str, Any]:
    """The container spec that runs this program in a pod, on the pod's IP (the downward API gives it)."""
    return {
        "name": "fake",
        "image": "fake",
        "command": [sys.executable, str(PROGRAM)],
        "args": ["--address=$(POD_IP)", f"--port={PORT}", *args],
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}},
    }


class Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # a connection per request: each one is balanced anew

    def do_GET(self) -> None:
        body = os.environ["POD_NAME"].encode() if self.path == "/name" else b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ignore-sigterm", action="store_true")
    options = parser.parse_args()

    def on_sigterm(*_: Any) -> None:
        print(f"SIGTERM {time.monotonic()}", flush=True)
        if not options.ignore_sigterm:
            os._exit(0)

    signal.signal(signal.SIGTERM, on_sigterm)
    ThreadingHTTPServer((options.address, options.port), Answer).serve_forever()


if __name__ == "__main__":
    main()
