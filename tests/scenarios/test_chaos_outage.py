"""The chaos suite, an API server outage: for two minutes every request to the API server is answered
500 and its watch streams end. The operator must outlast it, alone or elected through a Lease: its
pods keep serving with their readiness gates as they were, and an edit made once the API server
answers again is loaded on every pod within seconds. On the emulated API server with real
tritonservers as pods (faults from tests/support/faults.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from tests.support.election import elected_operator
from tests.support.faults import outage
from tests.support.operator import Cluster, Pods, api_server, running_operator
from tests.support.serving import RequestLoop, model_ready_at, revision_on, serve_add_model
from triton_operator.k8s.process import metrics

pytestmark = [pytest.mark.triton, pytest.mark.slow]

OUTAGE_SECONDS = 120.0  # past kopf's own retries (54 s in all), which ended the operator
EDIT_BOUND = 5.0  # from an edit made once the API server answers again to its load on every pod


def gates(cluster: Cluster, pods: Pods) -> dict[str, tuple[Any, Any]]:
    """Each pod's readiness-gate condition: its status and when it last changed."""
    return {
        name: ((c := cluster.pod_condition(name) or {}).get("status"), c.get("lastTransitionTime"))
        for name in pods.tritons
    }


async def revisions(pods: Pods) -> list[str]:
    return list(await asyncio.gather(*(asyncio.to_thread(revision_on, triton) for triton in pods.tritons.values())))


def gauge(metric: Any) -> float:
    return metric._value.get()


async def outlasts_an_outage(
    cluster: Cluster, pods: Pods, caplog: pytest.LogCaptureFixture, elected: bool = False
) -> None:
    """The add model serving on two pods through an outage; then an edit, loaded on both within the bound.
    `elected`: the operator holds a Lease, which it cannot renew meanwhile."""
    await serve_add_model(cluster, pods, ("triton-a", "triton-b"))
    await cluster.wait("ready on every pod", lambda: model_ready_at(cluster))
    urls = [triton.grpc_url for triton in pods.tritons.values()]
    before, in_service = await revisions(pods), gates(cluster, pods)
    assert all(status == "True" for status, _ in in_service.values())
    with RequestLoop(urls) as loop:
        with caplog.at_level(logging.WARNING, logger="triton_operator"), outage(cluster.server) as fault:
            started = time.monotonic()
            await cluster.wait(
                "the operator saying the API server does not answer",
                lambda: gauge(metrics.API_SERVER_REACHABLE) == 0,
                timeout=10,
            )
            if elected:
                await cluster.wait("the leader standing by", lambda: gauge(metrics.LEADER) == 0, timeout=10)
            await asyncio.sleep(
                OUTAGE_SECONDS - (time.monotonic() - started)
            )  # the fault's length, not a wait for something to happen
            assert gauge(metrics.API_SERVER_REACHABLE) == 0
        assert fault.seen > 0
        assert any("the API server does not answer" in r.getMessage() for r in caplog.records)
        assert gates(cluster, pods) == in_service
        edited = time.monotonic()
        await cluster.patch(
            "TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": 900}}}}
        )
        await cluster.wait_async(
            "the edit loaded on every pod", lambda: _all_changed(pods, before), timeout=EDIT_BOUND + 30
        )
        took = time.monotonic() - edited
    assert took < EDIT_BOUND, f"the edit made after the outage was loaded on every pod {took:.1f}s later"
    assert gauge(metrics.API_SERVER_REACHABLE) == 1 and gauge(metrics.LEADER) == 1
    assert loop.failures == [] and loop.sent > 0
    assert gates(cluster, pods) == in_service
    print(
        f"{fault.seen} requests refused during the outage; the edit after it loaded on every pod in {took:.2f}s; "
        f"{loop.sent} requests served"
    )


async def _all_changed(pods: Pods, before: list[str]) -> bool:
    return all(now != then and now for now, then in zip(await revisions(pods), before, strict=False))


async def test_the_operator_outlasts_a_two_minute_api_outage(pods: Pods, caplog: pytest.LogCaptureFixture) -> None:
    async with api_server() as cluster, running_operator(cluster):
        metrics.LEADER.set(1)  # as `run` sets it without leader election
        await outlasts_an_outage(cluster, pods, caplog)


async def test_an_elected_operator_outlasts_a_two_minute_api_outage_and_leads_again(
    pods: Pods, caplog: pytest.LogCaptureFixture
) -> None:
    """It cannot renew its Lease during the outage: it stops reconciling at its renew deadline, stands by,
    and takes the Lease again once the API server answers."""
    async with api_server() as cluster, elected_operator(cluster):
        await outlasts_an_outage(cluster, pods, caplog, elected=True)
