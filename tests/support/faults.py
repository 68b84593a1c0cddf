"""Faults injected on purpose, for the chaos tests: requests the emulated API server fails, and Triton
pods that stop answering.

- `ApiFault`: the API server answers matching requests with an error status (a 500 from an
  overloaded server, a 409 from a conflicting writer), a given number of times or until removed.
- `Hold`: the API server leaves matching requests unanswered until released, as a slow one does.
- `hang` / `resume`: SIGSTOP and SIGCONT to a pod's tritonserver: its ports still accept TCP
  connections (the kernel completes the handshake) but nothing answers, as with a wedged process.
- `stall`: watch streams that stay open and deliver nothing more, as behind a load balancer that
  lost the API server's side of the connection: only the client's own timeout ends them.
- `drop`: watch streams the API server closes at their next event, which is lost with them (as
  when an API server restarts): the client must watch again, and list what it missed.
- `outage`: the API server down for a while: every open watch stream ends at once, and every
  request meanwhile, the client's new watches among them, is answered 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from triton_operator.local.tritonserver import LocalTriton


@dataclass
class ApiFault:
    """Fail requests whose method and path match, `times` times (None: until removed)."""

    method: str  # a regular expression matching the whole method: "PATCH", "POST|PATCH|PUT"
    path: str  # a regular expression, searched in the request's path
    status: int = 500
    times: int | None = None
    identity: str | None = None  # an Authorization header to match, or any
    seen: int = 0  # requests failed so far

    def take(self, method: str, path: str, headers: Any) -> bool:
        """Whether this request fails (and counts it)."""
        if self.times is not None and self.seen >= self.times:
            return False
        if not re.fullmatch(self.method, method) or not re.search(self.path, path):
            return False
        if self.identity is not None and headers.get("Authorization") != self.identity:
            return False
        self.seen += 1
        return True


@dataclass
class Hold:
    """Leave requests whose method and path match, and whose JSON body has a match of `body`, unanswered
    until `released` is set."""

    method: str  # a regular expression matching the whole method
    path: str  # a regular expression, searched in the request's path
    body: str = ""  # a regular expression, searched in the request's body as JSON
    released: asyncio.Event = field(default_factory=asyncio.Event)
    held: int = 0  # requests waiting now

    def matches(self, method: str, path: str, data: Any) -> bool:
        return bool(
            re.fullmatch(self.method, method) and re.search(self.path, path) and re.search(self.body, json.dumps(data))
        )

    async def wait(self) -> None:
        self.held += 1
        try:
            await self.released.wait()
        finally:
            self.held -= 1


def hang(triton: LocalTriton) -> None:
    assert triton.process is not None
    os.kill(triton.process.pid, signal.SIGSTOP)


def resume(triton: LocalTriton) -> None:
    assert triton.process is not None
    os.kill(triton.process.pid, signal.SIGCONT)


@dataclass
class WatchStream:
    """A watch the emulated API server is serving; a stalled one drops every event from then on."""

    path: str
    stalled: bool = False
    dropped: bool = False
    ended: asyncio.Event = field(
        default_factory=asyncio.Event
    )  # set: the API server closes it now, even between events

    async def until_ended(self, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """`events` until the stream is ended: a watch waiting for its next event is closed at once."""
        ending = asyncio.ensure_future(self.ended.wait())
        following: asyncio.Future[tuple[bool, Any]] | None = None
        try:
            while True:
                following = asyncio.ensure_future(_next(events))
                await asyncio.wait({following, ending}, return_when=asyncio.FIRST_COMPLETED)
                if not following.done():
                    return
                more, event = following.result()
                if not more:
                    return
                yield event
        finally:
            # The pending read is the source's: cancelled with the stream (the client gone, or ended), else
            # the source would wait on for events nobody reads.
            for task in (ending, following):
                if task is not None:
                    task.cancel()
            await asyncio.gather(ending, *([following] if following is not None else []), return_exceptions=True)


async def _next(events: AsyncIterator[Any]) -> tuple[bool, Any]:
    """The next event, as (True, event), or (False, None) once there are no more."""
    try:
        return True, await anext(events)
    except StopAsyncIteration:
        return False, None


def stall(streams: Iterable[WatchStream], path: str) -> list[WatchStream]:
    """Stall the open watch streams whose path matches `path` (a regular expression); streams
    opened afterwards (the client's reconnection) are served as usual."""
    stalled = [stream for stream in streams if re.search(path, stream.path)]
    for stream in stalled:
        stream.stalled = True
    return stalled


def drop(streams: Iterable[WatchStream], path: str) -> list[WatchStream]:
    """Close the open watch streams whose path matches `path` (a regular expression) at their next
    event, without sending it."""
    dropped = [stream for stream in streams if re.search(path, stream.path)]
    for stream in dropped:
        stream.dropped = True
    return dropped


class FaultyServer(Protocol):
    """The emulated API server (tests/support/cluster.py), as the faults see it."""

    faults: list[ApiFault]
    watches: list[WatchStream]


@contextlib.contextmanager
def outage(server: FaultyServer, status: int = 500) -> Iterator[ApiFault]:
    """The API server down while inside: the open watch streams end at once, and every request,
    the client's new watches and the test's own among them, is answered `status`."""
    fault = ApiFault(".*", "", status=status)
    server.faults.append(fault)
    for stream in list(server.watches):
        stream.ended.set()
    try:
        yield fault
    finally:
        server.faults.remove(fault)
