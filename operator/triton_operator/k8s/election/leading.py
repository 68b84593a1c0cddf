"""`triton-operator run` with leader election: kopf runs only while this process holds the Lease.

A standby waits on the Lease (lease.py) and starts kopf once it has it. The leader renews it while
kopf runs. If it loses it (someone else holds it, or no renewal succeeded for the renew deadline: the
API server did not answer), it stops kopf at once (its stop flag, then cancellation if kopf takes
longer than half the time left before anyone may take over) and stands by again in the same process,
with a new kopf once it leads again: an API server that is back after an outage of any length finds
it ready, without a restart by the kubelet and its growing back-off. On SIGTERM or SIGINT, kopf stops
and then the Lease is released, so a standby takes over at its next read instead of after the lease
duration. /healthz is served here for the process's whole life (a standby has no kopf to answer the
kubelet's probe), with who leads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import aiohttp.web
import kopf

from ..api import KubernetesApi
from ..process.settings import Settings
from ..watch.handlers import register
from .lease import LeaderElector, Timing

logger = logging.getLogger(__name__)

Operate = Callable[
    [asyncio.Event, asyncio.Event], Coroutine[Any, Any, None]
]  # kopf.operator(..., stop_flag=, ready_flag=)
Login = Callable[..., Awaitable[kopf.ConnectionInfo]]
LOST = 1  # what a term of a leader that lost the Lease returns


def identity() -> str:
    """The pod's name (POD_NAME from the downward API, else the hostname) and something unique to this process."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex}"


def lease_namespace(configured: str) -> str:
    """The setting, else the pod's own namespace (POD_NAMESPACE from the downward API), else `default`."""
    return configured or os.environ.get("POD_NAMESPACE") or "default"


def stop_on_signals(stop: asyncio.Event) -> None:
    """SIGTERM and SIGINT set `stop` (in the main thread only, where signals arrive)."""
    if threading.current_thread() is threading.main_thread():
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)


async def elected(
    elector: LeaderElector, operate: Operate, stop: asyncio.Event, ready: asyncio.Event | None = None
) -> int:
    """One term: stand by until the Lease is ours, then `operate` while it stays ours. 0: stopped by
    `stop` (or by a signal), the Lease released; LOST: the Lease lost and kopf stopped. `ready`: set
    once kopf runs."""
    acquiring, stopping = asyncio.ensure_future(elector.acquire()), asyncio.ensure_future(stop.wait())
    await asyncio.wait({acquiring, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not acquiring.done() or stop.is_set():
        stopping.cancel()
        acquiring.cancel()
        await asyncio.gather(acquiring, return_exceptions=True)
        await elector.release()  # if it came in just as we were told to stop
        return 0
    acquiring.result()
    halt, started = asyncio.Event(), asyncio.Event()  # this term's kopf: its stop flag and its ready flag
    holding = asyncio.create_task(elector.hold(), name="leader election")  # before kopf, which leaves older tasks alone
    operating = asyncio.create_task(operate(halt, started), name="kopf")
    starting = asyncio.ensure_future(started.wait())  # still before kopf: it starts once this coroutine waits
    done, _ = await asyncio.wait({holding, operating, starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if starting in done and not done & {holding, operating, stopping}:
        # kopf put its own signal handlers in place of ours: take them back, so that kopf stops by its
        # stop flag (after a signal, kopf waits 5 s for its idle stop-flag waiter before it returns).
        stop_on_signals(stop)
        if ready is not None:
            ready.set()
        await asyncio.wait({holding, operating, stopping}, return_when=asyncio.FIRST_COMPLETED)
    starting.cancel()
    stopping.cancel()
    halt.set()
    if holding.done():  # lost: stop reconciling before anyone may take over
        timing = elector.timing
        _, pending = await asyncio.wait(
            {operating}, timeout=max(0.1, (timing.lease_seconds - timing.renew_deadline) / 2)
        )
        if pending:
            logger.error("kopf did not stop in time after the Lease was lost: cancelling it")
            operating.cancel()
        await asyncio.gather(operating, return_exceptions=True)
        if not holding.cancelled() and holding.exception() is not None:
            logger.error("leader election failed", exc_info=holding.exception())
        return LOST
    await asyncio.wait({operating})
    holding.cancel()
    await asyncio.gather(holding, return_exceptions=True)
    await elector.release()
    operating.result()  # kopf's own failure, if any, once the Lease is released
    return 0


@contextlib.asynccontextmanager
async def healthz(port: int, elector: LeaderElector) -> AsyncIterator[None]:
    """The liveness endpoint /healthz, for the leader and the standby alike: 200 while the process runs."""
    if not port:
        yield
        return

    async def health(_: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.json_response({"leader": elector.leading, "identity": elector.me})

    app = aiohttp.web.Application()
    app.router.add_get("/healthz", health)
    runner = aiohttp.web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await aiohttp.web.TCPSite(runner, "0.0.0.0", port).start()
    try:
        yield
    finally:
        await runner.cleanup()


async def run_elected(
    settings: Settings,
    operate: Operate,
    login: Login,
    stop: asyncio.Event | None = None,
    ready: asyncio.Event | None = None,
) -> int:
    """The operator as one of several replicas, term after term: a leader that lost the Lease stands by
    again and leads again when it can, so an API server that comes back after any outage finds it
    ready. 0 once `stop`, SIGTERM or SIGINT stopped it."""
    stop = stop or asyncio.Event()
    stop_on_signals(stop)
    api = KubernetesApi()

    async def relogin(**kwargs: Any) -> kopf.ConnectionInfo:
        return await login(logger=logger, settings=kopf.OperatorSettings(), **kwargs)

    api.authenticate(await relogin(), relogin)
    timing = Timing(settings.lease_duration_seconds, settings.renew_deadline_seconds, settings.retry_period_seconds)
    elector = LeaderElector(api, lease_namespace(settings.lease_namespace), settings.lease_name, identity(), timing)
    try:
        async with healthz(settings.liveness_port, elector):
            while await elected(elector, operate, stop, ready) == LOST and not stop.is_set():
                logger.warning("standing by again: kopf stopped, the pods serve on as they are")
            return 0
    finally:
        await api.close()


def kopf_terms(settings: Settings, login: Login, **scope: Any) -> Operate:
    """kopf with a registry and handlers' state of its own at each call: a leader that leads again starts
    from what the cluster holds then, as a new process would (what the last term saw may be stale)."""

    def operate(stop: asyncio.Event, ready: asyncio.Event) -> Coroutine[Any, Any, None]:
        registry = kopf.OperatorRegistry()
        register(registry, settings, login=login)
        return kopf.operator(registry=registry, standalone=True, stop_flag=stop, ready_flag=ready, **scope)

    return operate
