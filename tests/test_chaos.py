"""The chaos suite: faults the operator must heal by itself, each with its bound.

Each test injects one fault on the emulated API server (tests/support/faults.py), with real
tritonservers as pods where a pod is involved, and asserts how long the operator took to heal it,
measured around waits on the cluster's state, never decided by a sleep.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.operator import Cluster, api_server, running_operator
from tests.test_operator import SERVER

# How long the operator may take to act on what it was told (a pass: render, write, sync a pod).
PASS_BOUND = 5.0


async def healed_within(cluster: Cluster, bound: float, what: str, check: Callable[[], Any]) -> Any:
    """Wait for `check` (up to twice the bound, so a slow heal shows how slow) and assert it came within `bound` seconds."""
    start = time.monotonic()
    result = await cluster.wait(what, check, timeout=2 * bound)
    elapsed = time.monotonic() - start
    assert elapsed < bound, f"{what}: after {elapsed:.1f}s, over the bound of {bound:.0f}s"
    return result


async def test_a_server_without_models_is_reconciled_and_restored_after_a_restart() -> None:
    async with api_server() as cluster:
        children = [("Deployment", "triton"), ("Service", "triton"), ("Secret", "triton-control")]
        async with running_operator(cluster) as operator:
            await cluster.create(copy.deepcopy(SERVER))
            await healed_within(
                cluster, PASS_BOUND, "a lone server's children and status",
                lambda: all(cluster.get(*child) for child in children) and (cluster.get("TritonServer", "triton") or {}).get("status"),
            )
            # Workers are woken on the event loop only: a wake from another thread is refused, not lost.
            worker = operator.workers.get(("default", "triton"))
            with pytest.raises(RuntimeError):
                await asyncio.to_thread(worker.wake)

        await cluster.delete("Deployment", "triton")
        async with running_operator(cluster):
            await healed_within(cluster, PASS_BOUND, "the Deployment restored after a restart", lambda: cluster.get("Deployment", "triton"))
