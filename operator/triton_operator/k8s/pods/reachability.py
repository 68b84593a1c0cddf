"""Outlasting an API server that does not answer: kopf's requests retried for as long as it takes, at a
capped backoff, and the operator saying meanwhile that the API server is unreachable.

kopf retries a failed request (no connection, a timeout, a 5xx, 403, 429) by its setting
`networking.error_backoffs`. Its default, 1, 1, 2, 3, 5, 8, 13 and 21 s, runs out 54 s into an outage;
the request then raises, and a watch or kopf's resource observer that raises ends the operator
("Resource observer has failed"). Measured with kopf 1.45 on the emulated API server answering every
request 500 for 120 s: kopf.operator() raised 54 s in (its resource observer's watch of the CRDs) and
no edit after the outage landed, while the pods served on.
kopf takes an iterable of backoffs that has no length as retries without end, one per value it yields
(kopf/_cogs/clients/api.py), so `Retries` yields for ever, at most CAP_SECONDS apart: a watch resumes
within that time of the API server's return.

`Reachability` is what the operator says about it: the gauge `triton_operator_api_server_reachable`,
a warning when the API server stops answering and another when it answers again (kopf logs each
failed try besides). A request kopf retries reports its failure here, and a probe (`GET /version`,
which every client may read) tells an outage from a refusal and asks every CAP_SECONDS until the API
server answers: kopf says nothing when a retry succeeds.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiohttp

from ..api import ApiError, failure
from ..process import metrics

logger = logging.getLogger(__name__)

FIRST_BACKOFFS = (0.5, 1.0)  # a lone failure (one 500 under load) is retried soon
CAP_SECONDS = 2.0  # the longest wait between two tries of one request: how late a return is noticed


def unanswered(error: BaseException) -> bool:
    """Whether a failed request means the API server did not answer: no connection, no answer in time,
    or a 5xx. A 4xx is an answer (a refusal of this request), not an outage."""
    if isinstance(error, ApiError):
        return error.status >= 500
    return isinstance(error, (aiohttp.ClientError, OSError, TimeoutError))


class Reachability:
    """Whether the API server answers, as this process's requests find it."""

    def __init__(self, probe: Callable[[], Awaitable[Any]] | None = None, cap: float = CAP_SECONDS):
        """`probe`: a cheap request that raises while the API server does not answer, asked when a
        request kopf retries failed; None: the owner reports each request's outcome itself."""
        self.probe = probe
        self.cap = cap
        self.down_since: float | None = None
        self.probing: asyncio.Task[None] | None = None
        metrics.API_SERVER_REACHABLE.set(1)

    @property
    def reachable(self) -> bool:
        return self.down_since is None

    def failed(self, why: str) -> None:
        """A request found the API server not answering."""
        if self.down_since is None:
            self.down_since = time.monotonic()
            metrics.API_SERVER_REACHABLE.set(0)
            logger.warning(
                "the API server does not answer (%s): the operator retries every %gs until it does", why, self.cap
            )

    def answered(self) -> None:
        """A request got an answer from the API server."""
        if self.down_since is not None:
            logger.warning("the API server answers again, after %.1fs without", time.monotonic() - self.down_since)
            self.down_since = None
            metrics.API_SERVER_REACHABLE.set(1)

    def suspect(self) -> None:
        """A request kopf retries failed: for no answer, or for a refusal (kopf retries 403 and 429 too).
        The probe tells which, and asks again every `cap` seconds until the API server answers."""
        if self.probe is not None and (self.probing is None or self.probing.done()):
            self.probing = asyncio.get_running_loop().create_task(
                self._probe(), name="triton-operator API server probe"
            )

    async def _probe(self) -> None:
        assert self.probe is not None
        while True:
            try:
                await self.probe()
            except Exception as error:  # whatever the probe met: only an answer ends it
                if unanswered(error):
                    self.failed(failure(error))
                    await asyncio.sleep(self.cap)
                    continue
            self.answered()
            return

    async def stop(self) -> None:
        if self.probing is not None:
            self.probing.cancel()
            await asyncio.gather(self.probing, return_exceptions=True)


class Retries:
    """kopf's `networking.error_backoffs`, without end: FIRST_BACKOFFS, then CAP_SECONDS for ever (no
    `__len__`: kopf then retries for as long as values come). kopf iterates it anew for each request and
    takes the first value before it sends it, so each value after the first follows a failed attempt."""

    def __init__(self, reachability: Reachability):
        self.reachability = reachability

    def __iter__(self) -> Iterator[float]:
        for number, backoff in enumerate(itertools.chain(FIRST_BACKOFFS, itertools.repeat(self.reachability.cap))):
            if number:
                self.reachability.suspect()
            yield min(backoff, self.reachability.cap)
