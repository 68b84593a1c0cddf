"""Leader election on a `coordination.k8s.io/v1` Lease, by the rules of client-go's tools/leaderelection.

- A candidate takes the Lease when there is none, when its holder released it (empty holderIdentity),
  or when its record has not changed for its leaseDurationSeconds. That time is measured on the
  candidate's own monotonic clock from when the candidate saw the record change, never from the
  recorded renewTime: clocks that disagree do not matter (only clocks that run at different rates).
- Every write carries the resourceVersion it was decided on (a merge patch with metadata.resourceVersion,
  or a create): the API server refuses a stale one with 409, so of two candidates one wins.
- The leader renews every retry period. When no renewal succeeded for renewDeadline (< leaseDuration)
  since it sent its last good one, it has lost: it stops before anyone may take over, since a candidate
  waits leaseDuration from when it saw that renewal, which came later.
- A leader that stops cleanly releases the Lease (empty holder), so a standby takes it at its next read.

The decision is pure (`observe`, `decide`, `claim`, `released`) and takes the clock as an argument;
`LeaderElector` does the HTTP with the operator's KubernetesApi.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from ..api import CONFLICT, ApiError, KubernetesApi, failure
from ..pods.reachability import Reachability, unanswered
from ..process import metrics

logger = logging.getLogger(__name__)

JITTER = 1.2  # a standby reads every retry period times up to this, so candidates spread out (client-go's)


class Decision(enum.Enum):
    ACQUIRE = "acquire"  # no Lease, released, or expired: take it
    RENEW = "renew"  # ours: write a new renewTime
    WAIT = "wait"  # someone else's and not expired
    LOST = "lost"  # we led, and now it is someone else's or our renew deadline passed


@dataclass(frozen=True)
class Record:
    """The Lease's spec, as election reads and writes it."""

    holder: str = ""
    lease_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def of(cls, lease: Mapping[str, Any]) -> Record:
        spec = lease.get("spec") or {}
        duration, transitions = int(spec.get("leaseDurationSeconds") or 0), int(spec.get("leaseTransitions") or 0)
        return cls(
            spec.get("holderIdentity") or "", duration, spec.get("acquireTime"), spec.get("renewTime"), transitions
        )

    def spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_seconds,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


@dataclass(frozen=True)
class Observed:
    record: Record | None  # None: there is no Lease
    version: str | None  # its resourceVersion: the precondition of our next write
    since: float  # when this process first saw this record, on its own monotonic clock


def observe(previous: Observed | None, record: Record | None, version: str | None, now: float) -> Observed:
    """The Lease as read at `now`: `since` moves only when the record changed (client-go's observedTime)."""
    if previous is not None and previous.record == record:
        return replace(previous, version=version)
    return Observed(record, version, now)


def decide(observed: Observed, me: str, now: float, renewed: float | None, renew_deadline: float) -> Decision:
    """What to do with the Lease. `renewed`: when this leader sent its last renewal that succeeded; None on a
    standby."""
    record = observed.record
    if renewed is not None:
        if now - renewed >= renew_deadline or (record is not None and record.holder != me):
            return Decision.LOST
        return Decision.RENEW if record is not None else Decision.ACQUIRE  # deleted under us: create it again
    if record is not None and record.holder == me:
        return Decision.RENEW
    if record is None or not record.holder or now >= observed.since + record.lease_seconds:
        return Decision.ACQUIRE
    return Decision.WAIT


def microtime(wall: datetime.datetime) -> str:
    """A Lease's MicroTime: RFC 3339 in UTC with microseconds."""
    return wall.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def claim(record: Record | None, decision: Decision, me: str, lease_seconds: int, wall: datetime.datetime) -> Record:
    """The record to write for ACQUIRE or RENEW: a takeover counts one more leaseTransition."""
    now = microtime(wall)
    if decision is Decision.RENEW and record is not None:
        return replace(record, lease_seconds=lease_seconds, renew_time=now)
    return Record(me, lease_seconds, now, now, 0 if record is None else record.transitions + 1)


def released(record: Record, wall: datetime.datetime) -> Record:
    """client-go's release: no holder, a one-second lease, the transitions kept."""
    now = microtime(wall)
    return Record("", 1, now, now, record.transitions)


@dataclass(frozen=True)
class Timing:
    lease_seconds: int = 15
    renew_deadline: float = 10
    retry_period: float = 2


FAILURES = (ApiError, aiohttp.ClientError, OSError, TimeoutError)  # a round that failed; the next one may not


class LeaderElector:
    """One process's part in the election: `acquire`, then `hold` until lost, or `release`."""

    def __init__(
        self,
        api: KubernetesApi,
        namespace: str,
        name: str,
        me: str,
        timing: Timing = Timing(),
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ):
        self.api, self.namespace, self.name, self.me, self.timing = api, namespace, name, me, timing
        self.clock, self.wall = clock, wall
        self.observed: Observed | None = None
        self.renewed: float | None = None  # when the last renewal that succeeded was sent; None while standing by
        self.reachability = Reachability()  # a standby has no kopf: its rounds say whether the API server answers

    @property
    def leading(self) -> bool:
        return self.renewed is not None

    async def _write(self, record: Record, version: str | None) -> dict[str, Any] | None:
        """A create (no version) or a conditional merge patch; None if it did not land: someone wrote first (409),
        or the Lease is gone."""
        meta = {"name": self.name, "namespace": self.namespace} if version is None else {"resourceVersion": version}
        try:
            if version is None:
                return await self.api.create(
                    {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": record.spec()}
                )
            return await self.api.patch("Lease", self.namespace, self.name, {"metadata": meta, "spec": record.spec()})
        except ApiError as error:
            if error.status == CONFLICT:
                return None
            raise

    async def _round(self) -> Decision:
        """client-go's tryAcquireOrRenew: read, decide, write. ACQUIRE or RENEW once written; WAIT if not."""
        observed = self.observed
        if self.leading and observed is not None and observed.record is not None and observed.record.holder == self.me:
            sent = self.clock()  # the fast path: over the version we wrote last, no read
            written = await self._write(
                claim(observed.record, Decision.RENEW, self.me, self.timing.lease_seconds, self.wall()),
                observed.version,
            )
            if written is not None:
                return self._written(written, sent, Decision.RENEW)
        lease = await self.api.get("Lease", self.namespace, self.name)
        record = Record.of(lease) if lease is not None else None
        self.observed = observe(
            self.observed, record, lease["metadata"].get("resourceVersion") if lease else None, self.clock()
        )
        decision = decide(self.observed, self.me, self.clock(), self.renewed, self.timing.renew_deadline)
        if decision in (Decision.WAIT, Decision.LOST):
            return decision
        sent = self.clock()
        written = await self._write(
            claim(record, decision, self.me, self.timing.lease_seconds, self.wall()), self.observed.version
        )
        return Decision.WAIT if written is None else self._written(written, sent, decision)

    def _written(self, lease: dict[str, Any], sent: float, decision: Decision) -> Decision:
        self.observed = Observed(Record.of(lease), lease["metadata"].get("resourceVersion"), self.clock())
        self.renewed = sent
        return decision

    async def acquire(self) -> None:
        """Until this process holds the Lease."""
        metrics.LEADER.set(0)
        logger.info("standing by for Lease %s/%s as %s", self.namespace, self.name, self.me)
        while True:
            try:
                async with asyncio.timeout(self.timing.renew_deadline):
                    decision = await self._round()
                self.reachability.answered()
                if decision in (Decision.ACQUIRE, Decision.RENEW):
                    break
            except FAILURES as error:
                self._failed("reading", error)
            await asyncio.sleep(self.timing.retry_period * random.uniform(1, JITTER))
        metrics.LEADER.set(1)
        record = self.observed.record if self.observed else None
        logger.info(
            "leading: acquired Lease %s/%s as %s (transition %d)",
            self.namespace,
            self.name,
            self.me,
            record.transitions if record else 0,
        )

    async def hold(self) -> None:
        """Renew every retry period; return when the Lease is lost: someone else holds it, or no renewal
        succeeded within renew_deadline of the last good one (each attempt is cut off at that moment)."""
        assert self.renewed is not None, "acquire first"
        why = ""
        while not why:
            await asyncio.sleep(self.timing.retry_period)
            while True:
                left = self.renewed + self.timing.renew_deadline - self.clock()
                if left <= 0:
                    why = f"no renewal succeeded for {self.timing.renew_deadline:g}s"
                    break
                started = self.clock()
                try:
                    async with asyncio.timeout(left):
                        decision = await self._round()
                    self.reachability.answered()
                    if decision is Decision.LOST:
                        why = (
                            "it is held by "
                            f"{self.observed.record.holder if self.observed and self.observed.record else 'nobody'}"
                        )
                    if decision is not Decision.WAIT:
                        break
                except FAILURES as error:
                    self._failed("renewing", error)
                await asyncio.sleep(
                    max(
                        0.0,
                        min(
                            self.timing.retry_period - (self.clock() - started),
                            self.renewed + self.timing.renew_deadline - self.clock(),
                        ),
                    )
                )
        self.renewed = None
        metrics.LEADER.set(0)
        logger.error("lost Lease %s/%s: %s", self.namespace, self.name, why)

    def _failed(self, doing: str, error: BaseException) -> None:
        logger.warning("%s Lease %s/%s failed: %s", doing, self.namespace, self.name, failure(error))
        if unanswered(error):
            self.reachability.failed(failure(error))
        else:
            self.reachability.answered()

    async def release(self) -> None:
        """Give the Lease up (client-go's ReleaseOnCancel), if it is still ours: a standby takes it at once."""
        if not self.leading:
            return
        self.renewed = None
        metrics.LEADER.set(0)
        try:
            async with asyncio.timeout(self.timing.renew_deadline):
                for _ in range(3):  # not landed: a renewal of ours in flight moved the version; read again
                    lease = await self.api.get("Lease", self.namespace, self.name)
                    if lease is None or Record.of(lease).holder != self.me:
                        return
                    if await self._write(
                        released(Record.of(lease), self.wall()), lease["metadata"].get("resourceVersion")
                    ):
                        logger.info("released Lease %s/%s", self.namespace, self.name)
                        return
        except FAILURES as error:
            logger.warning(
                "releasing Lease %s/%s failed (a standby takes over when it expires): %s",
                self.namespace,
                self.name,
                failure(error),
            )
