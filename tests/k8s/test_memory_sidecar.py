"""What the operator does with a pod's memory sidecar answering anything: whatever listens on the pod's
port 8003 is read within a size, a nesting depth and a time, and a bad answer is a warning on that pod,
never a failed pass (k8s/server/sidecar_reads.py, memory/attribution.py's parse_table). The sidecar here is an aiohttp
app on a free loopback port, the pass one pod serving one model."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

from tests.support.ports import free_ports
from triton_operator.decide.seen import Pass, Pod
from triton_operator.k8s.server.sidecar_reads import ANSWER_LIMIT_BYTES, READ_TIMEOUT_SECONDS, MemoryReadings
from triton_operator.memory.attribution import READER_PATH
from triton_operator.protocol.desired import DesiredModel
from triton_operator.protocol.triton_proto import model_config_pb2 as pb
from triton_operator.triton.client import ModelState
from triton_operator.triton.sync import ReplicaReport

MiB = 1 << 20
POD = Pod("triton-a", "uid-a", "127.0.0.1:8001", deleting=False, models_ready="True", fingerprint="")
CONFIG = pb.ModelConfig(name="m", instance_group=[pb.ModelInstanceGroup(count=1)])
THIS_PASS = Pass(
    reports={POD.name: ReplicaReport(POD.address or "", states={"m": ModelState("m", True, "r1")})},
    pods=[POD],
    desired={"m": DesiredModel("m", "r1", CONFIG.SerializeToString())},
)
READER_ON = SimpleNamespace(memory_reader=SimpleNamespace(enabled=True))
RENDERED: Any = SimpleNamespace(server=SimpleNamespace(spec=READER_ON))  # what a reading reads of the server
STUB_CMDLINE = ["/opt/python/triton_python_backend_stub", "/models/m/1/model.py", "region", "1048576", "1048576",
                "5", "/opt/python", "336", "m_0_0", "DEFAULT"]  # fmt: skip


def table(**entry: Any) -> bytes:
    stub = {"pid": 7, "cmdline": STUB_CMDLINE, "rssBytes": 36 * MiB, "privateBytes": 17 * MiB} | entry
    return json.dumps({"stubs": [stub]}).encode()


Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]


def body(content: bytes) -> Answer:
    async def answer(_request: web.Request) -> web.StreamResponse:
        return web.Response(body=content, content_type="application/json")

    return answer


class Endless:
    """An answer that never ends, counting what it got to send before the operator hung up."""

    def __init__(self) -> None:
        self.sent = 0

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"stubs": ["')
        chunk = b"x" * (64 << 10)
        try:
            while True:
                await response.write(chunk)
                self.sent += len(chunk)
        except (ConnectionError, asyncio.CancelledError):
            return response


async def dripping(request: web.Request) -> web.StreamResponse:
    """A byte now and then, for ever: every byte comes within any read timeout, the answer never."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    while True:
        await response.write(b" ")
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def sidecar(answer: Answer) -> AsyncIterator[int]:
    async def handle(request: web.Request) -> web.StreamResponse:
        return await answer(request)

    app = web.Application()
    app.router.add_get(READER_PATH, handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    (port,) = free_ports(1)
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield port
    finally:
        await runner.cleanup()


async def read_through(answer: Answer) -> tuple[MemoryReadings, float]:
    """One pass's reading of the pod whose sidecar gives `answer`; how long it took."""
    async with sidecar(answer) as port:
        readings = MemoryReadings(("default", "triton"), wake=lambda: None, interval_seconds=0, port=port)
        started = asyncio.get_running_loop().time()
        try:
            await readings.read(RENDERED, THIS_PASS)
        finally:
            await readings.close()
        return readings, asyncio.get_running_loop().time() - started


async def test_a_sidecars_table_is_read() -> None:
    readings, _ = await read_through(body(table()))
    assert readings.figures()["m"].cpu is not None and readings.figures()["m"].cpu[0] == 17 * MiB


DEEP = 100_000


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        pytest.param(b'{"stubs": ' + b"[" * DEEP + b"]" * DEEP + b"}", "deeper", id="nested 100,000 deep"),
        pytest.param(b'{"stubs": [' + b"[" * 5 + b"]" * 5 + b"]}", "deeper", id="nested a little too deep"),
        pytest.param(table(pad="x" * (2 * MiB)), "larger", id="a table of 2 MiB"),
        pytest.param(b"\xff\xfe{}", "not", id="not UTF-8"),
        pytest.param(b'["stubs"]', "not", id="a list"),
        pytest.param(b'{"stubs": {"a": 1}}', "not", id="stubs not a list"),
        pytest.param(table(cmdline=[]), "command line", id="an empty command line"),
        pytest.param(table(cmdline=[*STUB_CMDLINE[:-1], 7]), "command line", id="a word not a string"),
        pytest.param(table(pid=1e400), "pid", id="an infinite pid"),
        pytest.param(table(privateBytes=-5), "privateBytes", id="memory below zero"),
        pytest.param(table(rssBytes=True), "rssBytes", id="a boolean for a number"),
        pytest.param(table(gpuBytes="12"), "gpuBytes", id="a string for a number"),
    ],
)
async def test_a_bad_answer_is_a_warning_on_its_pod_never_a_failed_pass(
    answer: bytes, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="triton_operator"):
        readings, _ = await read_through(body(answer))
    assert readings.figures() == {}
    (warning,) = [r.getMessage() for r in caplog.records if "memory sidecar of pod triton-a" in r.getMessage()]
    assert why in warning, warning


async def test_an_endless_answer_is_cut_at_the_limit(caplog: pytest.LogCaptureFixture) -> None:
    """The answer is read as it comes and dropped past the limit: the sidecar gets to send the limit and what
    the sockets buffer between them, not what it could send in the read timeout (hundreds of MiB)."""
    endless = Endless()
    with caplog.at_level(logging.WARNING, logger="triton_operator"):
        readings, _ = await read_through(endless)
    assert readings.figures() == {}
    assert any("larger than" in r.getMessage() for r in caplog.records)
    assert ANSWER_LIMIT_BYTES <= endless.sent < 32 * MiB


async def test_an_answer_that_never_ends_holds_the_pass_one_read_timeout() -> None:
    readings, took = await read_through(dripping)
    assert readings.figures() == {}
    assert READ_TIMEOUT_SECONDS <= took < READ_TIMEOUT_SECONDS + 2
