"""The control client's retries and timeouts, and the bound on replicas synced at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tritonclient.utils import InferenceServerException

from tests.support.ports import free_ports
from triton_operator.triton.client import ControlClient, ControlError, Timeouts
from triton_operator.triton.sync import Replica, ReplicaReport, sync_replicas


class FlakyTriton:
    """Stands in for tritonclient's aio client: fails `failures` times with `status`, then answers."""

    def __init__(self, failures: int, status: str):
        self.failures = failures
        self.status = status
        self.calls = 0

    async def unload_model(self, name: str, **kwargs: Any) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise InferenceServerException(f"Triton says no ({self.status})", status=f"StatusCode.{self.status}")

    async def close(self) -> None:
        pass


def unload_through(fake: FlakyTriton, retries: int = 3) -> None:
    async def run() -> None:
        client = ControlClient("127.0.0.1:1", retries=retries, backoff_seconds=0.01)
        await client.close()
        client._client = fake  # the transport is Triton's; what is tested here is the retry policy
        await client.unload("m")

    asyncio.run(run())


def test_transient_failures_are_retried_with_backoff() -> None:
    fake = FlakyTriton(failures=2, status="UNAVAILABLE")
    unload_through(fake)
    assert fake.calls == 3


def test_retries_are_bounded_and_the_error_keeps_tritons_words() -> None:
    fake = FlakyTriton(failures=10, status="UNAVAILABLE")
    with pytest.raises(ControlError) as raised:
        unload_through(fake, retries=2)
    assert fake.calls == 3 and raised.value.transient and "Triton says no" in raised.value.message


def test_a_rejection_is_not_retried() -> None:
    fake = FlakyTriton(failures=1, status="INVALID_ARGUMENT")
    with pytest.raises(ControlError) as raised:
        unload_through(fake)
    assert fake.calls == 1 and not raised.value.transient


def test_an_unreachable_replica_is_reported_not_raised() -> None:
    [port] = free_ports(1)

    async def run() -> ReplicaReport:
        async with ControlClient(f"127.0.0.1:{port}", timeouts=Timeouts(read_seconds=1), retries=1, backoff_seconds=0.01) as client:
            assert not await client.live()
            return await Replica(client).sync({})

    report = asyncio.run(run())
    assert report.error and not report.ok


def test_replicas_are_synced_in_parallel_within_the_bound() -> None:
    running = 0
    most = 0

    class SlowReplica:
        async def sync(self, desired: Any, managed: Any, progress: Any) -> ReplicaReport:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.02)
            running -= 1
            return ReplicaReport("x")

    reports = asyncio.run(sync_replicas([SlowReplica() for _ in range(10)], {}, parallel_replicas=3))  # type: ignore[list-item]
    assert len(reports) == 10 and most == 3
