"""Failover: the leading operator stopped -> the standby's first reconcile.

Two `triton-operator run -A` processes with leader election, on the emulated API server (in this
process, recording who wrote what when: tests/support/election.py), one TritonServer. Each repeat
starts afresh: operator a leads and has reconciled, b stands by; then a is SIGKILLed (b waits out
the lease duration from when it last saw a renew) or SIGTERMed (a releases the Lease as it stops;
b takes it at its next read). Measured from the signal: b's Lease write that took over, and b's
first write of anything but the Lease (kopf started, the server's first pass), per timing set: the
chart's defaults (client-go's 15/10/2 s) and short ones.

    .venv/bin/python bench/failover.py [--repeats 5] [--timings default,short] [--stops SIGKILL,SIGTERM]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.election import SERVER, SHORT, OperatorProcess, lease, one_writer_at_a_time, recording_api_server

TIMINGS = {
    "default": {"lease_duration_seconds": 15, "renew_deadline_seconds": 10, "retry_period_seconds": 2},
    "short": SHORT,
}


def holder(cluster: object) -> str:
    return ((lease(cluster) or {}).get("spec") or {}).get("holderIdentity") or ""  # type: ignore[arg-type]


async def failover(timings: dict[str, float], stop: signal.Signals) -> tuple[float, float]:
    """One repeat: (signal -> b took the Lease, signal -> b's first reconcile write), in seconds."""
    with tempfile.TemporaryDirectory() as workdir:
        async with recording_api_server() as (cluster, server):
            settings = {**timings, "log_level": "WARNING"}
            a = OperatorProcess(Path(workdir), cluster.url, "a", **settings).start()
            b = OperatorProcess(Path(workdir), cluster.url, "b", **settings)
            try:
                await cluster.create(copy.deepcopy(SERVER))
                await cluster.wait(
                    "a leading, reconciled",
                    lambda: holder(cluster).startswith("a_") and cluster.get("Deployment", "triton"),
                    timeout=120,
                )
                b.start()
                await cluster.wait("b standing by", lambda: b.leader_gauge() == 0, timeout=120)
                await asyncio.sleep(1)  # b has read the Lease at least once more
                a.signal(stop)
                stopped_at = time.monotonic()
                assert await a.exited(60) in (0, -signal.SIGKILL), a.log()
                first = await cluster.wait(
                    "b's first reconcile",
                    lambda: [w.at for w in server.writes if w.token == b.token and not w.lease],
                    timeout=120,
                )
                took = min(w.at for w in server.writes if w.token == b.token and w.lease and w.status < 400)
                one_writer_at_a_time(server.writes, [a.token, b.token])
                return took - stopped_at, min(first) - stopped_at
            finally:
                a.stop()
                b.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--timings", default="default,short", help="comma-separated: " + ", ".join(TIMINGS))
    parser.add_argument("--stops", default="SIGKILL,SIGTERM", help="comma-separated signals sent to the leader")
    args = parser.parse_args()
    print(
        "| timings (lease/renew/retry s) | leader stopped by | Lease taken over (median, min-max) "
        "| first reconcile (median, min-max) |"
    )
    print("| --- | --- | --- | --- |")
    runs = {}
    for name in args.timings.split(","):
        timings = TIMINGS[name]
        for stop in (signal.Signals[s] for s in args.stops.split(",")):
            results = [asyncio.run(failover(timings, stop)) for _ in range(args.repeats)]
            took, first = [r[0] for r in results], [r[1] for r in results]
            label = (
                f"{name} ({timings['lease_duration_seconds']:g}/{timings['renew_deadline_seconds']:g}"
                f"/{timings['retry_period_seconds']:g})"
            )
            print(
                f"| {label} | {stop.name} | {statistics.median(took):.2f} s ({min(took):.2f}-{max(took):.2f}) "
                f"| {statistics.median(first):.2f} s ({min(first):.2f}-{max(first):.2f}) |",
                flush=True,
            )
            runs[f"{name} {stop.name}"] = [round(t, 2) for t in first]
    print("first reconcile, every repeat (s): " + "; ".join(f"{k} {v}" for k, v in runs.items()))
    print(f"pid {os.getpid()}, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
