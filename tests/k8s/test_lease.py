"""Leader election: two operator replicas, one active, through a Lease (k8s/election/lease.py, leading.py).

The decision is table-tested with an injected clock; the elector against the emulated API server;
then whole operators: two in-process (one leads and reconciles, the other takes over at once when
the first stops cleanly), two processes with the leader SIGKILLed (the standby takes over after the
lease duration and serves an edit made while nobody led), and a leader whose Lease writes the API
server refuses (it stops within the renew deadline and stands by again). In each, the API server's record
of who wrote what when shows that no two operators wrote at once; and a check that this detector
sees two operators run without election.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import kopf
import pytest

from tests.support.election import (
    LEASES,
    SERVER,
    SHORT,
    OperatorProcess,
    RecordingApiServer,
    ThreadedOperator,
    Write,
    lease,
    one_writer_at_a_time,
    recording_api_server,
    writer_spans,
)
from tests.support.faults import ApiFault
from tests.support.operator import NAMESPACE, Cluster
from triton_operator.k8s.api import KubernetesApi
from triton_operator.k8s.election.lease import (
    Decision,
    LeaderElector,
    Observed,
    Record,
    Timing,
    claim,
    decide,
    observe,
    released,
)
from triton_operator.k8s.process import metrics

ME, OTHER = "operator-a_1", "operator-b_2"
WALL = datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC)
HELD = Record(OTHER, 15, "2026-01-02T03:00:00.000000Z", "2026-01-02T03:04:00.000000Z", 3)
MINE = Record(ME, 15, "2026-01-02T03:00:00.000000Z", "2026-01-02T03:04:00.000000Z", 3)
ANCIENT = Record(
    OTHER, 15, "2001-01-01T00:00:00.000000Z", "2001-01-01T00:00:00.000000Z", 3
)  # a holder's clock far behind
FUTURE = Record(OTHER, 15, "2099-01-01T00:00:00.000000Z", "2099-01-01T00:00:00.000000Z", 3)  # or far ahead
DEADLINE = 10.0


@pytest.mark.parametrize(
    "record, seen_at, now, renewed, expected",
    [
        # A standby (renewed=None): the record's own timestamps never count, only when this process saw it change.
        (None, 100.0, 100.0, None, Decision.ACQUIRE),  # no Lease: create it
        (HELD, 100.0, 100.0, None, Decision.WAIT),
        (HELD, 100.0, 114.9, None, Decision.WAIT),  # unchanged for 14.9 s of its 15
        (HELD, 100.0, 115.0, None, Decision.ACQUIRE),  # unchanged for its whole leaseDurationSeconds: expired
        (ANCIENT, 100.0, 100.1, None, Decision.WAIT),  # renewTime 25 years old, but it just changed: held
        (FUTURE, 100.0, 115.0, None, Decision.ACQUIRE),  # renewTime in 2099, but unchanged for 15 s: expired
        (Record("", 1, None, None, 4), 100.0, 100.0, None, Decision.ACQUIRE),  # released: take it at once
        (
            Record(OTHER, 1, None, None, 0),
            100.0,
            101.0,
            None,
            Decision.ACQUIRE,
        ),  # the record's duration counts, not ours
        (MINE, 100.0, 100.0, None, Decision.RENEW),  # ours already
        # The leader (renewed = when its last good renewal was sent).
        (MINE, 100.0, 105.0, 100.0, Decision.RENEW),
        (MINE, 100.0, 109.9, 100.0, Decision.RENEW),
        (MINE, 100.0, 110.0, 100.0, Decision.LOST),  # no renewal for the renew deadline: stop
        (HELD, 100.0, 101.0, 100.0, Decision.LOST),  # someone else holds it
        (Record("", 1, None, None, 4), 100.0, 101.0, 100.0, Decision.LOST),  # released by someone else
        (None, 100.0, 101.0, 100.0, Decision.ACQUIRE),  # deleted under the leader: create it again
    ],
)
def test_decide(record: Record | None, seen_at: float, now: float, renewed: float | None, expected: Decision) -> None:
    assert decide(Observed(record, "7", seen_at), ME, now, renewed, DEADLINE) is expected


def test_the_time_a_record_was_seen_moves_only_when_it_changes() -> None:
    first = observe(None, HELD, "7", now=100.0)
    assert first == Observed(HELD, "7", 100.0)
    same = observe(first, HELD, "8", now=105.0)  # a new resourceVersion (labels edited), the same record
    assert same == Observed(HELD, "8", 100.0)
    renewed = Record(OTHER, 15, HELD.acquire_time, "2026-01-02T03:04:02.000000Z", 3)
    assert observe(same, renewed, "9", now=106.0) == Observed(renewed, "9", 106.0)
    assert observe(first, None, None, now=107.0) == Observed(None, None, 107.0)


def test_a_standby_takes_over_a_lease_duration_after_it_last_saw_the_record_change() -> None:
    """Ticking a clock: reading every 2 s, the holder renewing until t=20 and then gone."""
    observed: Observed | None = None
    decisions = {}
    for tick in range(0, 60, 2):
        now = float(tick)
        record = Record(OTHER, 15, "a", f"renewed at {min(tick, 20)}", 0)  # the holder's own clock says what it likes
        observed = observe(observed, record, str(tick), now)
        decisions[tick] = decide(observed, ME, now, None, DEADLINE)
    assert {t for t, d in decisions.items() if d is Decision.ACQUIRE} == set(
        range(36, 60, 2)
    )  # 20 + 15, at the next read


def test_the_records_written() -> None:
    created = claim(None, Decision.ACQUIRE, ME, 15, WALL)
    assert created == Record(ME, 15, "2026-01-02T03:04:05.678901Z", "2026-01-02T03:04:05.678901Z", 0)
    taken = claim(HELD, Decision.ACQUIRE, ME, 15, WALL)
    assert taken == Record(
        ME, 15, "2026-01-02T03:04:05.678901Z", "2026-01-02T03:04:05.678901Z", 4
    )  # one more transition
    renewal = claim(MINE, Decision.RENEW, ME, 15, WALL)
    assert renewal == Record(ME, 15, MINE.acquire_time, "2026-01-02T03:04:05.678901Z", 3)  # acquired when it was
    assert released(MINE, WALL) == Record("", 1, "2026-01-02T03:04:05.678901Z", "2026-01-02T03:04:05.678901Z", 3)
    assert Record.of({"spec": created.spec()}) == created
    assert Record.of({"spec": {}}) == Record()


# The elector alone, against the emulated API server.

# Short, yet with room for a busy machine: a leader loses only after 2 s without one good renewal.
FAST = Timing(lease_seconds=3, renew_deadline=2.0, retry_period=0.2)


def elector(cluster: Cluster, me: str, timing: Timing = FAST) -> LeaderElector:
    api = KubernetesApi()
    info = kopf.ConnectionInfo(server=cluster.url, insecure=True, token=me)

    async def login() -> kopf.ConnectionInfo:
        return info

    api.authenticate(info, login)
    return LeaderElector(api, NAMESPACE, "triton-operator", me, timing)


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with recording_api_server() as (cluster, _):
        yield cluster


@pytest.mark.slow
async def test_one_candidate_holds_the_lease_and_the_other_takes_it_when_released(cluster: Cluster) -> None:
    a, b = elector(cluster, ME), elector(cluster, OTHER)
    try:
        await asyncio.wait_for(a.acquire(), 5)
        assert (
            a.leading
            and lease(cluster)["spec"]["holderIdentity"] == ME
            and lease(cluster)["spec"]["leaseTransitions"] == 0
        )
        assert metrics.LEADER._value.get() == 1
        waiting = asyncio.create_task(b.acquire())
        holding = asyncio.create_task(a.hold())
        await asyncio.sleep(FAST.lease_seconds + 1)  # renewed all along: b never gets it
        assert not waiting.done() and not holding.done() and lease(cluster)["spec"]["holderIdentity"] == ME
        holding.cancel()
        await a.release()
        released_at = time.monotonic()
        assert lease(cluster)["spec"]["holderIdentity"] == ""
        await asyncio.wait_for(waiting, 5)
        took = time.monotonic() - released_at
        assert b.leading and not a.leading
        spec = lease(cluster)["spec"]
        assert (
            spec["holderIdentity"] == OTHER
            and spec["leaseTransitions"] == 1
            and spec["leaseDurationSeconds"] == FAST.lease_seconds
        )
        assert took < FAST.lease_seconds, f"took {took:.2f}s: a released Lease is taken at the next read, not on expiry"
    finally:
        await a.api.close()
        await b.api.close()


@pytest.mark.slow
async def test_a_holder_that_stops_renewing_is_replaced_a_lease_duration_after_it_was_last_seen(
    cluster: Cluster,
) -> None:
    """Its renewTime is 25 years old (its clock is wrong): that does not make it expired; not changing does."""
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "triton-operator"},
        "spec": ANCIENT.spec() | {"leaseDurationSeconds": 2},
    }
    await cluster.request("POST", LEASES.format(ns=NAMESPACE), body)
    b = elector(cluster, ME)
    try:
        started = time.monotonic()
        await asyncio.wait_for(b.acquire(), 10)
        took = time.monotonic() - started
        assert 2 <= took < 2 + 2 * FAST.retry_period * 1.2 + 1, took
        assert lease(cluster)["spec"]["leaseTransitions"] == ANCIENT.transitions + 1
    finally:
        await b.api.close()


@pytest.mark.slow
async def test_a_leader_that_cannot_renew_gives_up_at_its_renew_deadline() -> None:
    async with recording_api_server() as (cluster, server):
        a = elector(cluster, ME)
        try:
            await asyncio.wait_for(a.acquire(), 5)
            server.faults.append(lease_writes_refused(ME))
            refused_from = time.monotonic()
            await asyncio.wait_for(a.hold(), 10)
            lost_at = time.monotonic()
            last_renewal = max(w.at for w in server.writes if w.lease and w.token == ME and w.status < 400)
            assert not a.leading and metrics.LEADER._value.get() == 0
            assert last_renewal < refused_from
            # Its deadline runs from when it sent that renewal, a little before the API server received it.
            assert FAST.renew_deadline - 0.1 <= lost_at - last_renewal < FAST.renew_deadline + 0.5, (
                lost_at - last_renewal
            )
        finally:
            await a.api.close()


@pytest.mark.slow
async def test_a_leader_whose_lease_someone_else_took_stops_at_its_next_renewal(cluster: Cluster) -> None:
    a = elector(cluster, ME, Timing(lease_seconds=15, renew_deadline=10, retry_period=0.2))
    try:
        await asyncio.wait_for(a.acquire(), 5)
        holding = asyncio.create_task(a.hold())
        await cluster.request(
            "PATCH",
            LEASES.format(ns=NAMESPACE) + "/triton-operator",
            {"spec": {"holderIdentity": OTHER}},
            "application/merge-patch+json",
        )
        await asyncio.wait_for(holding, 2)
        assert not a.leading
    finally:
        await a.api.close()


def lease_writes_refused(token: str) -> ApiFault:
    """This operator's writes of the Lease fail (500), as when etcd times out, until the fault is removed."""
    return ApiFault("POST|PATCH|PUT", "/leases", status=500, identity=f"Bearer {token}")


# Whole operators.


def deployment_replicas(cluster: Cluster) -> int | None:
    deployment = cluster.get("Deployment", "triton")
    return deployment["spec"]["replicas"] if deployment else None


def served(cluster: Cluster, replicas: int) -> bool:
    """The server's Deployment has these replicas and its status describes its latest spec."""
    server = cluster.get("TritonServer", "triton") or {}
    status = server.get("status") or {}
    return (
        deployment_replicas(cluster) == replicas
        and status.get("observedGeneration") == server["metadata"]["generation"]
    )


async def create_server(cluster: Cluster) -> None:
    await cluster.create(copy.deepcopy(SERVER))


def holder(cluster: Cluster) -> str:
    return ((lease(cluster) or {}).get("spec") or {}).get("holderIdentity") or ""


def non_lease_writers(writes: list[Write]) -> set[str]:
    return set(writer_spans(writes))


@pytest.mark.slow
async def test_of_two_operators_one_leads_and_reconciles_and_the_other_takes_over_when_it_stops() -> None:
    """In-process, each in a thread of its own. The lease is long (15 s), so a takeover within a few
    seconds of a clean stop is the release at work, not the expiry."""
    timing = {
        "lease_duration_seconds": 15,
        "renew_deadline_seconds": 10,
        "retry_period_seconds": 0.5,
        "leader_election": True,
    }
    async with recording_api_server() as (cluster, server):
        a = ThreadedOperator(cluster.url, "operator-a", **timing).start()
        b = ThreadedOperator(cluster.url, "operator-b", **timing).start()
        try:
            await create_server(cluster)
            await cluster.wait("the server reconciled", lambda: served(cluster, 1))
            [leader] = {w.token for w in server.writes if w.lease and w.status < 400}  # exactly one wrote the Lease
            assert non_lease_writers(server.writes) == {leader}  # and only it reconciled
            assert lease(cluster)["spec"]["leaseTransitions"] == 0
            leading, standing_by = (a, b) if leader == a.token else (b, a)

            assert await leading.stop() == 0
            stopped_at = time.monotonic()
            assert holder(cluster) == ""  # released
            await cluster.patch("TritonServer", "triton", {"spec": {"replicas": 2}})
            await cluster.wait("the edit served by the other operator", lambda: served(cluster, 2), timeout=30)
            took = min(w.at for w in server.writes if w.token == standing_by.token and not w.lease) - stopped_at
            assert took < 5, f"the standby's first write came {took:.1f}s after the release; the lease is 15 s"
            assert lease(cluster)["spec"]["leaseTransitions"] == 1
            one_writer_at_a_time(server.writes, [leading.token, standing_by.token])
        finally:
            await asyncio.gather(a.stop(), b.stop())


@dataclass
class TwoOperators:
    cluster: Cluster
    server: RecordingApiServer
    a: OperatorProcess
    b: OperatorProcess
    edits: asyncio.Task[None]  # the server edited every 0.2 s since before b started

    async def stop_editing(self) -> None:
        self.edits.cancel()
        await asyncio.gather(self.edits, return_exceptions=True)


@pytest.fixture
async def two_operators(tmp_path: Path) -> AsyncIterator[TwoOperators]:
    """Operator a started and leading, its server reconciled; then the server edited every 0.2 s, so
    whoever reconciles keeps writing (an operator that wrote while another did would show); then
    operator b, standing by (its /healthz and gauge say so) while a writes. Both `triton-operator run
    -A` with the SHORT timings; killed at the end if still running."""
    async with recording_api_server() as (cluster, server):
        a = OperatorProcess(tmp_path, cluster.url, "a").start()
        b = OperatorProcess(tmp_path, cluster.url, "b")
        edits = None
        try:
            await create_server(cluster)
            await cluster.wait(
                "a leading, the server reconciled",
                lambda: holder(cluster).startswith("a_") and served(cluster, 1),
                timeout=60,
            )
            edits = asyncio.create_task(keep_editing(cluster))
            b.start()
            await cluster.wait("b standing by", lambda: b.leader_gauge() == 0, timeout=60)
            b_ready = time.monotonic()
            assert json.loads(b.scrape("/healthz"))["leader"] is False
            assert a.leader_gauge() == 1 and json.loads(a.scrape("/healthz"))["leader"] is True
            # Long enough for a b that reconciled too to have written as well (its first pass comes within a second).
            await cluster.wait(
                "a writing for 2 s while b stands by",
                lambda: any(w.token == a.token and not w.lease and w.at > b_ready + 2 for w in server.writes),
            )
            yield TwoOperators(cluster, server, a, b, edits)
        finally:
            if edits is not None:
                edits.cancel()
                await asyncio.gather(edits, return_exceptions=True)
            a.stop()
            b.stop()


async def keep_editing(cluster: Cluster) -> None:
    """Edit the server every 0.2 s (replicas 2, 1, 2, ...)."""
    replicas = 1
    while True:
        replicas = 3 - replicas
        await cluster.patch("TritonServer", "triton", {"spec": {"replicas": replicas}})
        await asyncio.sleep(0.2)


@pytest.mark.slow
async def test_the_leader_killed_the_standby_takes_over_after_the_lease_duration_and_serves_what_changed_meanwhile(
    two_operators: TwoOperators,
) -> None:
    cluster, server, a, b = two_operators.cluster, two_operators.server, two_operators.a, two_operators.b
    lease_seconds, retry = SHORT["lease_duration_seconds"], SHORT["retry_period_seconds"]
    a.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    assert await a.exited(10) == -signal.SIGKILL
    await two_operators.stop_editing()
    await cluster.patch("TritonServer", "triton", {"spec": {"replicas": 3}})  # while nobody leads

    await cluster.wait("the edit served by b", lambda: served(cluster, 3), timeout=60)
    assert holder(cluster).startswith("b_") and lease(cluster)["spec"]["leaseTransitions"] == 1
    a_renewed = max(w.at for w in server.writes if w.token == a.token and w.lease and w.status < 400)
    b_took = min(w.at for w in server.writes if w.token == b.token and w.lease and w.status < 400)
    b_first = min(w.at for w in server.writes if w.token == b.token and not w.lease)
    # client-go's rule: b saw a's last renewal no earlier than the API server took it, and waits a lease duration
    # from then.
    assert b_took >= a_renewed + lease_seconds, f"b took the Lease {b_took - a_renewed:.2f}s after a's last renewal"
    # ... and no later than a lease duration plus two reads (the one that saw the last change, the one that took
    # over) and kopf's start.
    failover = b_first - killed_at
    assert failover < lease_seconds + 2 * retry * 1.2 + 5, f"b's first reconcile came {failover:.2f}s after the kill"
    one_writer_at_a_time(server.writes, [a.token, b.token])
    assert b.leader_gauge() == 1
    print(
        f"b took the Lease {b_took - a_renewed:.2f}s after a's last renewal; its first reconcile came "
        f"{failover:.2f}s after the kill"
    )

    b.signal(signal.SIGTERM)  # a clean stop: the Lease released for whoever comes next
    terminated_at = time.monotonic()
    assert await b.exited(30) == 0, b.log()
    assert holder(cluster) == ""
    # kopf stopped by its stop flag: after a signal of its own it would wait 5 s for its idle flag waiter.
    assert time.monotonic() - terminated_at < 4.5


@pytest.mark.slow
async def test_a_leader_that_cannot_renew_stops_reconciling_within_its_renew_deadline_and_stands_by(
    two_operators: TwoOperators,
) -> None:
    """a keeps writing the edits when the API server starts refusing its Lease writes: it must stop
    writing within the renew deadline of its last renewal, before b may take over, and stand by again
    in the same process (its gauge 0, still running); b then serves the edits."""
    cluster, server, a, b = two_operators.cluster, two_operators.server, two_operators.a, two_operators.b
    deadline, lease_seconds = SHORT["renew_deadline_seconds"], SHORT["lease_duration_seconds"]
    server.faults.append(lease_writes_refused(a.token))
    refused_at = time.monotonic()
    await cluster.wait("a standing by again", lambda: "standing by again" in a.log(), timeout=deadline + 20)
    stood_by_after = time.monotonic() - refused_at
    await cluster.wait("b leading", lambda: holder(cluster).startswith("b_"), timeout=30)
    await two_operators.stop_editing()
    replicas = (cluster.get("TritonServer", "triton") or {})["spec"]["replicas"]
    await cluster.wait("b serving the last edit", lambda: served(cluster, replicas), timeout=30)

    a_renewed = max(w.at for w in server.writes if w.token == a.token and w.lease and w.status < 400)
    a_last = max(w.at for w in server.writes if w.token == a.token and not w.lease)
    assert a_renewed < refused_at
    stopped = a_last - a_renewed
    # Its renew deadline runs from when it sent that renewal (before the API server took it); 0.5 s for
    # writes already sent and a busy machine's event loop, still before anyone may take over (lease_seconds).
    assert stopped < deadline + 0.5 < lease_seconds, (
        f"a wrote {stopped:.2f}s after its last renewal (renew deadline {deadline}s)"
    )
    assert "lost Lease" in a.log()
    assert a.process is not None and a.process.poll() is None, "a exited instead of standing by"
    assert a.leader_gauge() == 0 and json.loads(a.scrape("/healthz"))["leader"] is False
    one_writer_at_a_time(server.writes, [a.token, b.token])
    print(
        f"a stopped writing {stopped:.2f}s after its last renewal, stood by {stood_by_after:.2f}s after its Lease "
        "writes were first refused"
    )


@pytest.mark.slow
async def test_the_detector_sees_two_operators_syncing_at_once_without_election() -> None:
    """The check above would catch two active operators: here two run without leader election."""
    async with recording_api_server() as (cluster, server):
        a = ThreadedOperator(cluster.url, "operator-a", leader_election=False).start()
        b = ThreadedOperator(cluster.url, "operator-b", leader_election=False).start()
        try:
            await create_server(cluster)
            await cluster.wait("the server reconciled", lambda: served(cluster, 1))
            both = {a.token, b.token}
            # both wrote before the edit too: one that started late would write only after the other's last write
            await cluster.wait(
                "both writing before the edit", lambda: {w.token for w in server.writes if not w.lease} >= both
            )
            edited_at = time.monotonic()
            await cluster.patch("TritonServer", "triton", {"spec": {"replicas": 2}})
            await cluster.wait(
                "both writing after the edit",
                lambda: {w.token for w in server.writes if w.at > edited_at and not w.lease} >= both,
            )
            with pytest.raises(AssertionError, match="two operators syncing at once"):
                one_writer_at_a_time(server.writes, [a.token, b.token])
        finally:
            await asyncio.gather(a.stop(), b.stop())
