"""Each server's worker resyncs at a point of its own in the period, so servers started or woken
together do not resync together (an edit meanwhile would wait at each of its steps through the event
loop for a slice of every one of those passes)."""

from __future__ import annotations

import time

from triton_operator.k8s.process.settings import Settings
from triton_operator.k8s.server.worker import ServerWorker, resync_phase
from triton_operator.k8s.server.workers import Workers
from triton_operator.k8s.watch.indexes import Indexes

PERIOD = 60.0
SERVERS = 30


def most_within_a_tenth(points: list[float]) -> int:
    """The most points in any window of a tenth of the period, around the circle the period makes."""
    return max(sum((other - point) % PERIOD < PERIOD / 10 for other in points) for point in points)


def test_the_workers_points_are_spread_evenly_over_the_period() -> None:
    for servers in (2, 3, 10, SERVERS, 100):
        phases = sorted(resync_phase(place, PERIOD) for place in range(servers))
        assert all(0 <= phase < PERIOD for phase in phases)
        gaps = [later - earlier for earlier, later in zip(phases, [*phases[1:], phases[0] + PERIOD], strict=False)]
        assert max(gaps) < 2.7 * PERIOD / servers, servers
    assert most_within_a_tenth([resync_phase(place, PERIOD) for place in range(SERVERS)]) <= 4


async def test_servers_whose_passes_end_together_resync_apart_and_within_one_period() -> None:
    settings = Settings(resync_seconds=PERIOD)
    workers = [ServerWorker(("default", f"triton-{place}"), None, None, settings, place) for place in range(SERVERS)]  # type: ignore[arg-type]
    now = time.monotonic()
    delays = [worker.until_resync() for worker in workers]  # as after passes that all ended now
    assert all(0 < delay <= PERIOD for delay in delays)
    assert most_within_a_tenth(delays) <= 4
    for worker, delay in zip(workers, delays, strict=False):
        landing = (now + delay - worker.resync_phase) % PERIOD
        assert min(landing, PERIOD - landing) < 1  # at its own point


async def test_the_operator_gives_each_server_worker_the_next_place() -> None:
    workers = Workers(None, Settings(resync_seconds=PERIOD))  # type: ignore[arg-type]
    workers.indexes = Indexes({}, {}, {}, {}, {}, {}, {}, {})  # type: ignore[arg-type]
    made = [workers.get(("default", f"triton-{place}")) for place in range(3)]
    try:
        assert [worker.resync_phase for worker in made] == [resync_phase(place, PERIOD) for place in range(3)]
    finally:
        await workers.stop()
