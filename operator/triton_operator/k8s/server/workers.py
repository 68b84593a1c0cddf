"""The operator's workers, one per TritonServer key: started on the first wake, gone when their server is;
they share the models' files ConfigMaps and one Expectations record."""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Callable

from ...decide.seen import ServerKey
from ..api import KubernetesApi
from ..expectations import Expectations
from ..process.settings import Settings
from ..watch.indexes import Indexes
from .config_map_files import ConfigMapFiles
from .worker import ServerWorker


class Workers:
    """The running workers, one per server key; started on first wake, gone when their server is."""

    def __init__(self, api: KubernetesApi, settings: Settings):
        self.api = api
        self.settings = settings
        self.indexes: Indexes | None = None
        self.running: dict[ServerKey, tuple[ServerWorker, asyncio.Task[None]]] = {}
        self.places = itertools.count()  # each worker made takes the next place in the resync period
        self.files = ConfigMapFiles(api)
        self.expectations = Expectations()  # what every writer of the operator wrote, until the watch shows it
        self.moving: Callable[[str], None] = lambda namespace: None  # the placement's, once it runs

    def get(self, key: ServerKey) -> ServerWorker:
        """The server's worker, started if it is not running."""
        entry = self.running.get(key)
        if entry is None or entry[1].done():
            assert self.indexes is not None
            worker = ServerWorker(
                key,
                self.indexes,
                self.api,
                self.settings,
                next(self.places),
                self.files,
                lambda namespace: self.moving(namespace),
                self.expectations,
            )
            task = asyncio.get_running_loop().create_task(
                worker.run(), name=f"triton-operator worker {key[0]}/{key[1]}"
            )
            task.add_done_callback(functools.partial(self._ended, key))
            entry = self.running[key] = (worker, task)
        return entry[0]

    def _ended(self, key: ServerKey, task: asyncio.Task[None]) -> None:
        """A worker that ended (its server and models are gone) takes what it kept with it."""
        if self.running.get(key, (None, None))[1] is task:
            del self.running[key]

    def wake(self, key: ServerKey) -> None:
        self.get(key).wake()

    async def stop(self) -> None:
        tasks = [task for _, task in self.running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.running.clear()
