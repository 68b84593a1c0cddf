"""The memory sidecar (`triton-operator memory-sidecar`): serves the pod's python stubs as /proc shows
them, and what NVML says they hold on the GPUs, so the operator can attribute their memory to models
(memory/attribution.py, memory/nvml.py).

It runs in the server's pod with `shareProcessNamespace: true`, so its /proc holds Triton's stubs; it
measures nothing of its own: each GET of READER_PATH reads them afresh (its cost: bench/RESULTS.md,
"A python model's host memory") and
answers `{"stubs": [{pid, cmdline, rssBytes, privateBytes, gpuBytes}, ...]}`, gpuBytes absent where
the GPUs could not be read (no NVML or no GPU in the sidecar, or pids not the pod's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from .attribution import READER_PATH, StubProcess, read_stubs
from .nvml import process_gpu_bytes


def read_pod() -> list[StubProcess]:
    """The pod's stubs, with their GPU memory where it can be known."""
    return read_stubs(gpu=process_gpu_bytes())


def reader_app(read: Callable[[], list[StubProcess]] = read_pod) -> web.Application:
    """The sidecar's HTTP app; `read` lists the stubs (the mini cluster's kubelet reads its pod's alone)."""

    async def stubs(_request: web.Request) -> web.Response:
        found = await asyncio.to_thread(read)  # /proc reads block: the loop answers meanwhile
        return web.json_response({"stubs": [stub.to_json() for stub in found]})

    app = web.Application()
    app.router.add_get(READER_PATH, stubs)
    return app


def serve(host: str, port: int) -> None:
    """Serve until stopped (SIGTERM or SIGINT)."""
    web.run_app(reader_app(), host=host, port=port, print=None, handle_signals=True)
