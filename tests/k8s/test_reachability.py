"""Outlasting an API server that does not answer (triton_operator/k8s/pods/reachability.py): kopf's retries
without end, what counts as no answer, and the gauge and log lines while it lasts."""

from __future__ import annotations

import asyncio
import collections.abc
import itertools
import logging

import aiohttp
import kopf
import pytest

from triton_operator.k8s.api import ApiError
from triton_operator.k8s.pods.reachability import CAP_SECONDS, Reachability, Retries, unanswered
from triton_operator.k8s.process import metrics
from triton_operator.k8s.process.settings import Settings
from triton_operator.k8s.watch.handlers import configure_kopf


def gauge() -> float:
    return metrics.API_SERVER_REACHABLE._value.get()


def test_kopf_retries_without_end_at_a_capped_backoff() -> None:
    settings = kopf.OperatorSettings()
    reachability = Reachability()
    configure_kopf(settings, Settings(metrics_port=0, liveness_port=0), reachability)
    backoffs = settings.networking.error_backoffs
    # kopf counts the retries of a sized iterable and escalates after the last (kopf/_cogs/clients/api.py).
    assert isinstance(backoffs, collections.abc.Iterable) and not isinstance(backoffs, collections.abc.Sized)
    first = list(itertools.islice(backoffs, 1000))
    assert len(first) == 1000 and max(first) == CAP_SECONDS and first[-1] == CAP_SECONDS
    assert first[0] < CAP_SECONDS  # a lone failure is tried again soon
    assert list(itertools.islice(backoffs, 3)) == first[:3]  # anew for each request


def test_the_watch_timeout_reaches_the_api_server_as_whole_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf sends it as timeoutSeconds, which kube-apiserver parses as an integer: `120.0` was refused
    with 400 on every watch, so the operator watched nothing on a real cluster."""
    settings = kopf.OperatorSettings()
    configure_kopf(settings, Settings(metrics_port=0, liveness_port=0), Reachability())
    assert type(settings.watching.server_timeout) is int and str(settings.watching.server_timeout) == "120"
    monkeypatch.setenv("TRITON_OPERATOR_WATCH_SERVER_TIMEOUT_SECONDS", "1.5")
    with pytest.raises(ValueError, match="watch_server_timeout_seconds"):
        Settings(metrics_port=0, liveness_port=0)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ApiError(500, "etcd timed out"), True),
        (ApiError(503, "unavailable"), True),
        (aiohttp.ClientConnectionError("refused"), True),
        (TimeoutError(), True),
        (ConnectionRefusedError(), True),
        (ApiError(403, "forbidden"), False),  # a refusal is an answer
        (ApiError(409, "conflict"), False),
        (ApiError(429, "too many requests"), False),
    ],
)
def test_what_counts_as_no_answer(error: BaseException, expected: bool) -> None:
    assert unanswered(error) is expected


async def test_each_retry_asks_the_probe_which_says_when_the_api_server_answers_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answers = asyncio.Queue[BaseException | None]()

    async def probe() -> None:
        outcome = await answers.get()
        if outcome is not None:
            raise outcome

    reachability = Reachability(probe, cap=0.01)
    retries = iter(Retries(reachability))
    with caplog.at_level(logging.WARNING, logger="triton_operator"):
        next(retries)  # taken before the first try: nothing failed yet
        assert reachability.probing is None
        next(retries)  # the first try failed
        await answers.put(ApiError(500, "injected"))
        await answers.put(aiohttp.ClientConnectionError("refused"))
        await asyncio.sleep(0)
        while answers.qsize():
            await asyncio.sleep(0.01)
        assert not reachability.reachable and gauge() == 0
        next(retries)  # more retries while it probes start no second probe
        probing = reachability.probing
        await answers.put(None)
        assert probing is not None
        await asyncio.wait_for(probing, 5)
        assert reachability.reachable and gauge() == 1 and reachability.probing is probing
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if "does not answer (500: injected)" in m]) == 1, said
    assert len([m for m in said if "answers again" in m]) == 1, said


async def test_a_refusal_is_an_answer() -> None:
    """kopf retries a 403 as well: the probe answers, and the API server is not said to be down."""

    async def forbidden() -> None:
        raise ApiError(403, "forbidden")

    reachability = Reachability(forbidden, cap=0.01)
    reachability.suspect()
    assert reachability.probing is not None
    await asyncio.wait_for(reachability.probing, 5)
    assert reachability.reachable and gauge() == 1
