"""A server's worker stops when the operator stops it, even when a wake lands in the same tick.

On Python 3.11 `asyncio.wait_for` drops a cancellation that meets the awaited result: a worker woken
as it was stopped went on to another pass and a whole resync period of waiting, and the operator's
shutdown hung (seen once in a full test run, on a worker woken by a watch event during the stop)."""

from __future__ import annotations

import asyncio

import pytest

from triton_operator.k8s.process.settings import Settings
from triton_operator.k8s.server.worker import ServerWorker
from triton_operator.k8s.watch.indexes import Indexes

KEY = ("default", "triton")


async def idle_worker() -> tuple[ServerWorker, asyncio.Task[None]]:
    """A worker whose server exists and whose passes settle at once, after its first pass: waiting for
    a wake or its resync, a minute away."""
    server = {"metadata": {"namespace": KEY[0], "name": KEY[1]}}
    indexes = Indexes({KEY: [server]}, {}, {}, {}, {}, {}, {}, {})  # type: ignore[arg-type]
    worker = ServerWorker(KEY, indexes, None, Settings(resync_seconds=60), 0)  # type: ignore[arg-type]

    async def settled() -> bool:
        return True

    worker.reconcile = settled  # type: ignore[method-assign]
    task = asyncio.create_task(worker.run())
    async with worker.done:
        await worker.done.wait_for(lambda: worker.finished >= 1)
    for _ in range(3):  # the ticks from the pass's end into its wait
        await asyncio.sleep(0)
    return worker, task


@pytest.mark.parametrize("woken", [False, True], ids=["idle", "woken-in-the-same-tick"])
async def test_a_stopped_worker_ends_at_once(woken: bool) -> None:
    worker, task = await idle_worker()
    assert not task.done() and worker.started == 1  # it waits: the first pass settled
    if woken:
        worker.wake()
    task.cancel()
    await asyncio.wait([task], timeout=5)
    task.cancel()  # a worker that went on is not left running
    assert worker.started == 1  # no pass after the stop
    await asyncio.wait([task])
    assert task.cancelled()
