"""A pool of Triton shared-memory regions for clients on the same host (or in the same pod).

Nothing happens on import; regions are created and registered at
`open()` and unregistered and destroyed at `close()` (and destroyed at process exit); regions a
crashed run left under the same prefix are reclaimed at the next `open()` through Triton's status
API and the shared-memory module tritonclient uses; leases work from sync and async code, wait
with a timeout, never hand one region to two users, and always come back, on errors and
cancellation too.

The pool's size is a TritonModel's `sharedMemory.clientPool` (regions x regionBytes): the operator
counts it into the pod's /dev/shm, where a sidecar's regions live next to Triton's. Servers the
operator runs register shared memory only for the key in their `<server>-shm` Secret: give it as `key`.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import inspect
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from .regions import Region, RegionKind, SystemRegions, key_headers

# The calls a pool makes on its client, yielded one at a time: run directly for sync clients,
# awaited for aio clients. One sequence of steps serves both.
Steps = Generator["Callable[[], Any] | Pause", Any, None]


class _PoolTimeout(enum.Enum):
    """lease()'s default: a one-member enum, so mypy tells it apart from a number of seconds."""

    POOL = enum.auto()


POOL_TIMEOUT: Final = _PoolTimeout.POOL  # lease(): use the pool's lease_timeout
# Triton lets go of a region a moment after it answers the request that used it, and until then
# refuses to unregister it ("... it is currently in use"): seen when closing right after the
# last answer on a loaded machine. Closing retries that, doubling the wait from 10 ms.
IN_USE = "currently in use"
IN_USE_RETRIES = 8


@dataclass(frozen=True)
class Pause:
    """A step that only waits: time.sleep or asyncio.sleep, as the pool is driven."""

    seconds: float


class PoolExhausted(TimeoutError):
    """Every region stayed leased for the whole timeout."""


class _Waiter:
    """Someone waiting for a region: a thread (event) or a coroutine (future on its loop)."""

    def __init__(self, future: asyncio.Future[Region] | None = None):
        self.region: Region | None = None
        self.event = threading.Event()
        self.future = future


@dataclass
class _Leases:
    """Free regions and waiters under one lock, so a region is handed to exactly one holder."""

    free: deque[Region] = field(default_factory=deque)
    waiters: deque[_Waiter] = field(default_factory=deque)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, waiter: _Waiter) -> Region | None:
        with self.lock:
            if self.free:
                return self.free.popleft()
            self.waiters.append(waiter)
            return None

    def give_back(self, region: Region) -> None:
        region.reset()
        with self.lock:
            while self.waiters:
                waiter = self.waiters.popleft()
                waiter.region = region
                if waiter.future is None:
                    waiter.event.set()
                    return
                if not waiter.future.done():
                    waiter.future.get_loop().call_soon_threadsafe(self._resolve, waiter.future, region)
                    return
            self.free.append(region)

    def _resolve(self, future: asyncio.Future[Region], region: Region) -> None:
        if future.done():  # it gave up (timeout, cancellation) after the region was handed over
            self.give_back(region)
        else:
            future.set_result(region)

    def withdraw(self, waiter: _Waiter) -> Region | None:
        """Stop waiting. Returns the region handed over meanwhile, if any."""
        with self.lock:
            if waiter in self.waiters:
                self.waiters.remove(waiter)
                return None
            return waiter.region


class Lease:
    """`with pool.lease() as region` or `async with pool.lease() as region`."""

    def __init__(self, pool: SharedMemoryPool, timeout: float | None):
        self._pool = pool
        self._timeout = timeout
        self._region: Region | None = None

    def __enter__(self) -> Region:
        self._region = self._pool._acquire(self._timeout)
        return self._region

    def __exit__(self, *exc_info: object) -> None:
        region, self._region = self._region, None
        if region is not None:
            self._pool._leases.give_back(region)

    async def __aenter__(self) -> Region:
        self._region = await self._pool._acquire_async(self._timeout)
        return self._region

    async def __aexit__(self, *exc_info: object) -> None:
        self.__exit__(*exc_info)


class SharedMemoryPool:
    """N regions of B bytes registered with one Triton, leased to one user at a time.

    Works with tritonclient's http, grpc and aio clients: with a sync client use `open()` /
    `close()` or `with`, with an aio client `await pool.aopen()` / `await pool.aclose()` or
    `async with`. Leases work from threads and coroutines alike.
    """

    def __init__(
        self,
        client: Any,
        regions: int,
        region_bytes: int,
        prefix: str = "triton-pool",
        lease_timeout: float | None = 30.0,
        kind: RegionKind | None = None,
        key: str | None = None,
    ):
        if regions < 1 or region_bytes < 1:
            raise ValueError("a pool needs at least one region of at least one byte")
        self.client = client
        self.regions = regions
        self.region_bytes = region_bytes
        self.prefix = prefix
        self.lease_timeout = lease_timeout
        self.kind = kind or SystemRegions()
        self._headers = key_headers(client, key)  # the server's shared-memory key, where it has one
        self._leases = _Leases()
        self._opened: list[Region] = []
        self._finalizer: weakref.finalize[[Iterable[Region]], SharedMemoryPool] | None = None

    @property
    def names(self) -> list[str]:
        """The names the regions are registered under with Triton."""
        return [f"{self.prefix}_{index}" for index in range(self.regions)]

    def _owns(self, name: str) -> bool:
        head, _, index = name.rpartition("_")
        return head == self.prefix and index.isdigit()

    @property
    def _asynchronous(self) -> bool:
        return inspect.iscoroutinefunction(self.kind.register_function(self.client))

    @staticmethod
    def _run(steps: Steps) -> None:
        """Run the steps' calls directly; a failing call is thrown back into the steps to clean up."""
        try:
            call = next(steps)
            while True:
                try:
                    if isinstance(call, Pause):
                        time.sleep(call.seconds)
                        result = None
                    else:
                        result = call()
                except BaseException as error:
                    call = steps.throw(error)
                else:
                    call = steps.send(result)
        except StopIteration:
            return

    @staticmethod
    async def _arun(steps: Steps) -> None:
        """The same, awaiting each call (aio clients)."""
        try:
            call = next(steps)
            while True:
                try:
                    result = await (asyncio.sleep(call.seconds) if isinstance(call, Pause) else call())
                except BaseException as error:
                    call = steps.throw(error)
                else:
                    call = steps.send(result)
        except StopIteration:
            return

    def _sync_only(self, verb: str) -> None:
        if self._asynchronous:
            raise TypeError(f"this client is asynchronous: use `await pool.a{verb}()` or `async with pool`")

    # -- open and close ----------------------------------------------------------------------

    def open(self) -> SharedMemoryPool:
        self._sync_only("open")
        self._run(self._open_steps())
        return self

    async def aopen(self) -> SharedMemoryPool:
        await self._arun(self._open_steps())
        return self

    def _open_steps(self) -> Steps:
        if self._opened:
            raise RuntimeError("the pool is already open")
        registered = self.kind.registered((yield lambda: self.kind.status(self.client, self._headers)))
        for name, key in sorted(registered.items()):
            if self._owns(name):  # left by a run that crashed before close()
                yield functools.partial(self.kind.unregister, self.client, name, self._headers)
                self.kind.forget_local(name, key)
        for name in self.names:  # created but never registered before a crash
            self.kind.forget_local(name, None)
        try:
            for name in self.names:
                region = self.kind.create(name, self.region_bytes)
                self._opened.append(region)
                yield functools.partial(self.kind.register, self.client, region, self._headers)
        except BaseException:
            self.kind.destroy_all(self._opened)
            self._opened = []
            raise
        self._leases = _Leases(free=deque(self._opened))
        # At interpreter exit, destroy what close() did not; the next open() reclaims the server side.
        self._finalizer = weakref.finalize(self, self.kind.destroy_all, list(self._opened))

    def close(self) -> None:
        self._sync_only("close")
        self._run(self._close_steps())

    async def aclose(self) -> None:
        await self._arun(self._close_steps())

    def _close_steps(self) -> Steps:
        regions, self._opened = self._opened, []
        try:
            for region in regions:
                for attempt in range(IN_USE_RETRIES):
                    try:
                        yield functools.partial(self.kind.unregister, self.client, region.name, self._headers)
                        break
                    except Exception as error:
                        if IN_USE not in str(error) or attempt == IN_USE_RETRIES - 1:
                            raise
                    yield Pause(0.01 * 2**attempt)
        finally:
            if self._finalizer is not None:
                self._finalizer()  # destroys the regions, once
                self._finalizer = None

    def __enter__(self) -> SharedMemoryPool:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> SharedMemoryPool:
        return await self.aopen()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- leases ------------------------------------------------------------------------------

    def lease(self, timeout: float | Literal[_PoolTimeout.POOL] | None = POOL_TIMEOUT) -> Lease:
        """A region for one user; waits up to `timeout` seconds (default: the pool's lease_timeout; None: forever)."""
        if not self._opened:
            raise RuntimeError("open the pool before leasing from it")
        return Lease(self, self.lease_timeout if timeout is POOL_TIMEOUT else timeout)

    @property
    def available(self) -> int:
        """Regions not leased right now."""
        return len(self._leases.free)

    def _exhausted(self, timeout: float | None) -> PoolExhausted:
        return PoolExhausted(
            f"all {self.regions} regions of pool '{self.prefix}' stayed leased for {timeout}s: "
            "return leases sooner or add regions (and raise the TritonModel's sharedMemory.clientPool.regions)"
        )

    def _acquire(self, timeout: float | None) -> Region:
        waiter = _Waiter()
        region = self._leases.take(waiter)
        if region is not None:
            return region
        waiter.event.wait(timeout)
        region = self._leases.withdraw(waiter)  # the one handed over, maybe just as the wait ended
        if region is not None:
            return region
        raise self._exhausted(timeout)

    async def _acquire_async(self, timeout: float | None) -> Region:
        future: asyncio.Future[Region] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(future)
        region = self._leases.take(waiter)
        if region is not None:
            return region
        try:
            async with asyncio.timeout(timeout):
                return await future
        except BaseException as error:
            if future.done() and not future.cancelled():
                self._leases.give_back(future.result())  # got one, but leaves without it
            else:
                self._leases.withdraw(waiter)  # one handed over meanwhile comes back through _resolve
            if isinstance(error, asyncio.TimeoutError):
                raise self._exhausted(timeout) from None
            raise
