"""Models that kill their server: a model whose load was under way each time a pod's tritonserver died, twice,
is held back on that server's pods until its revision (config or files) changes, so a crash loop never keeps
the server's other models out of service. Pure: k8s/server/crash_watch.py sees the deaths, k8s/pods/pod_sync.py
applies the holds.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Deaths with a model's load under way after which it is held back: one may be bad luck (a node's OOM killer).
HELD_AFTER = 2


@dataclass(frozen=True)
class ServerDeath:
    """One death of a pod's tritonserver as seen: the pod, how it ended, and the loads under way then."""

    pod: str
    ended: str  # "signal 11 (SIGSEGV)", "exit code 1", or what was seen
    loading: frozenset[str]  # the models whose load was under way


@dataclass(frozen=True)
class CrashRecord:
    """The deaths of the server's pods with a model's load under way, at one revision of it."""

    revision: str
    deaths: tuple[str, ...]  # "pod triton-a: signal 11 (SIGSEGV)"


def termination(container_status: Mapping[str, Any]) -> str:
    """How a container last ended, from its status's lastState.terminated: its signal where the runtime
    gives one or its exit code says one (128 + N), else its exit code and reason; "" when it never ended."""
    ended = (container_status.get("lastState") or {}).get("terminated") or {}
    if not ended:
        return ""
    code, number = ended.get("exitCode"), ended.get("signal") or 0
    if not number and isinstance(code, int) and code > 128:
        number = code - 128
    with_reason = f" ({ended['reason']})" if ended.get("reason") else ""
    if number:
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown"
        return f"signal {number} ({name})" + (f", exit code {code}" if code else "") + with_reason
    return f"exit code {code}{with_reason}"


def count_deaths(
    records: Mapping[str, CrashRecord], deaths: Sequence[ServerDeath], revisions: Mapping[str, str]
) -> dict[str, CrashRecord]:
    """The records after these deaths: each declared model loading in one gains it, at the revision it should run
    (`revisions`); a record whose model moved to another revision, or is no longer declared, is dropped."""
    kept = {name: record for name, record in records.items() if revisions.get(name) == record.revision}
    for death in deaths:
        for name in sorted(death.loading & revisions.keys()):
            before = kept[name].deaths if name in kept else ()
            kept[name] = CrashRecord(revisions[name], (*before, f"pod {death.pod}: {death.ended}"))
    return kept


def held_back(records: Mapping[str, CrashRecord], server: str) -> dict[str, str]:
    """The models held back on the server's pods, each with why."""
    return {
        name: (
            f"TritonServer {server}'s tritonserver died {len(record.deaths)} times while this model loaded "
            f"({'; '.join(record.deaths[-HELD_AFTER:])}): it is not loaded on this server's pods again until its "
            "config or files change"
        )
        for name, record in records.items()
        if len(record.deaths) >= HELD_AFTER
    }
