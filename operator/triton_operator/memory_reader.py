"""The memory sidecar (`triton-operator memory-sidecar`): serves the pod's python stubs as /proc shows
them, so the operator can attribute their memory to models (memory.py).

It runs in the server's pod with `shareProcessNamespace: true`, so its /proc holds Triton's stubs; it
measures nothing of its own: each GET of READER_PATH reads them afresh (about 0.3-0.65 ms a stub) and
answers `{"stubs": [{pid, cmdline, rssBytes, privateBytes}, ...]}`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from .memory import READER_PATH, StubProcess, read_stubs


def reader_app(read: Callable[[], list[StubProcess]] = read_stubs) -> web.Application:
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
