"""Keep a replica's models as declared: read what it runs, plan (triton/sync_plan.py), execute.

Rules, from what Triton does (docs/triton-facts.md); what is loaded, reloaded or unloaded, and in
which order, is the plan's (its rules are in its module):
- A failed load leaves the old version serving; the failure (Triton's text) is reported and the
  same revision is not tried again on that replica until the desired revision changes or the
  caller forgets the failure (`forget_failures`: the model's files were saved again).
- Loads and unloads run as tasks of their own that outlive one sync, up to `parallel_loads` loads
  and as many unloads at once: Triton loads different models side by side, so one slow load
  (a minute in `initialize`) holds up no other model. A sync starts what is new, waits at most
  its `settle_seconds`, and reports what still runs as in flight; an action's end calls
  `on_ended` (another sync reports it).
- A model with an action in flight gets no second one. Triton runs one load of a model at a time (a
  second load call waits for the first, measured), so a revision that moves on meanwhile is loaded
  once the running load ends, by the sync its end asks for; a model no longer declared is unloaded
  then too.
- Reloads on one replica run one at a time: /dev/shm is sized for one model's old and new
  instances side by side (render/shm.py). So a slow reload holds up the reloads (edits) of other
  models on that replica, never their first loads or unloads.
- An ensemble's load waits for its steps' actions, and an unload for the actions on ensembles.
- A model Triton is loading for an earlier operator (this one restarted mid-load) is waited for,
  not loaded again: see `Replica._adopt`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..protocol.desired import DesiredModel
from .batching import ModelStatistics
from .client import NOT_CONNECTED, ControlClient, ControlError, ModelState
from .health import Heal, Healer
from .sync_plan import Action, plan

READY_POLL_SECONDS = 1.0  # how often a load an earlier operator started is checked for its end
REREAD_SHARE = 10  # each read of a replica reads again the configs of the tenth of its models read longest ago


@dataclass(frozen=True)
class Outcome:
    action: Action
    error: str = ""
    seconds: float = 0.0
    revision: str = ""  # the revision a load asked for
    interrupted: bool = False  # the replica went away during it (its tritonserver died, or is unreachable)

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass
class ReplicaReport:
    """What one sync did on one replica and what the replica said afterwards."""

    endpoint: str
    outcomes: list[Outcome] = field(default_factory=list)  # the actions that ended since the last sync
    states: dict[str, ModelState] = field(default_factory=dict)
    managed: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)  # model -> Triton's error for its desired revision
    in_flight: set[str] = field(default_factory=set)  # models with a load or unload still running
    error: str = ""  # the replica itself could not be reached
    key_refused: bool = False  # the replica refused the control key
    healed: dict[str, str] = field(
        default_factory=dict
    )  # model -> what was found failing every request, and done about it
    probe_failed: dict[str, str] = field(
        default_factory=dict
    )  # model -> why its first probe here failed: loaded, never counted ready

    @property
    def ok(self) -> bool:
        return not self.error and not self.failed


Progress = Callable[[str, Action, Outcome | None], None]


def _changed_by(outcomes: Iterable[Outcome], observed: Mapping[str, ModelState]) -> set[str]:
    """The models whose state the ended actions may have changed: their own, and the steps of an
    ensemble unloaded with its dependents. Only these are read again after a sync; the others stay as
    read just before it (reading all again made a one-model change cost far more: bench/RESULTS.md,
    "Measurements behind the design")."""
    changed = set()
    for outcome in outcomes:
        changed.add(outcome.action.model)
        if outcome.action.unload_dependents and outcome.action.model in observed:
            changed |= set(observed[outcome.action.model].composing)
    return changed


class Replica:
    """One Triton endpoint and what the sync remembers about it: failed revisions, revisions last seen
    ready, the actions in flight, and when a read of it began that has not been answered yet."""

    def __init__(
        self,
        client: ControlClient,
        parallel_loads: int = 4,
        on_ended: Callable[[], None] | None = None,
        adopt_seconds: float = 600.0,
    ):
        """`adopt_seconds`: how long a load an earlier operator started is waited for (its load timeout)."""
        self.client = client
        self.parallel_loads = parallel_loads
        self.on_ended = on_ended
        self.adopt_seconds = adopt_seconds
        self.reading_since: float | None = None  # time.monotonic() at the start of a read still unanswered
        self._failures: dict[str, tuple[str, str]] = {}  # model -> (revision that failed, Triton's error)
        self._ready: dict[str, str] | None = (
            None  # model -> the revision it was ready at after the last sync; None: not read yet
        )
        self._in_flight: dict[str, asyncio.Task[Outcome | None]] = {}  # model -> its load, unload or wait
        self._ticks = itertools.count()  # orders reads and actions
        self._read_configs: dict[str, tuple[int, ModelState]] = {}  # ready model -> (tick of its read, state)
        self._acted: dict[str, int] = {}  # model -> the tick an action of ours on it last started or ended
        self._ensembles: set[str] = set()  # models the last read found to be ensembles: their steps unload after them
        self._ended: list[Outcome] = []  # outcomes not reported yet
        self._settling = False  # a sync waits for actions now: it reports those that end meanwhile
        self._loads = asyncio.Semaphore(parallel_loads)
        self._unloads = asyncio.Semaphore(parallel_loads)
        self._reload_lock = asyncio.Lock()  # reloads run one at a time: /dev/shm holds one reload's overlap
        self.healer = Healer()

    async def sync(
        self,
        desired: Mapping[str, DesiredModel],
        managed: Iterable[str] = (),
        progress: Progress | None = None,
        keep: Iterable[str] = (),
        settle_seconds: float | None = None,
    ) -> ReplicaReport:
        """Start what brings the replica to `desired`, wait for the actions in flight at most
        `settle_seconds` (None: until they end), and report what the replica says then."""
        managed = set(managed)
        report = ReplicaReport(self.client.url, managed=managed | set(desired))
        failed_revisions = {name: revision for name, (revision, _) in self._failures.items()}
        moved = self._moved_on(desired, failed_revisions) - self._in_flight.keys()
        self._start([Action("reload", name) for name in sorted(moved)], desired, progress)  # while the rest is read
        try:
            observed = await self._read((desired.keys() | managed) - moved)
            self._ensembles = {name for name, state in observed.items() if state.composing}
            if self._ready is None:
                await self._adopt(observed, desired, managed)
            # A moved model's reload is started (it may have ended already): busy, never "ours, not desired",
            # though the repository index lists it where the server's repository holds a folder of its name.
            self._start(
                plan(observed, desired, managed, failed_revisions, keep, self._in_flight.keys() | moved),
                desired,
                progress,
            )
            await self._settle(settle_seconds)
            report.outcomes, self._ended = self._ended, []
            changed = _changed_by(report.outcomes, observed) | moved
            report.states = observed | await self._read(changed) if changed else observed
        except ControlError as error:
            self._ended = report.outcomes + self._ended  # remembered by the next sync that reads the replica
            self._ready = None
            self._read_configs.clear()  # it may have restarted: the next read reads every config
            report.error = error.message
            report.key_refused = error.key_refused
            return report
        self._ready = {name: state.revision for name, state in report.states.items() if state.ready}
        self._remember(report.outcomes, desired, report.states)
        report.in_flight = set(self._in_flight)
        # What this replica may still hold of ours: a managed model it no longer has is forgotten here
        # (unloaded now, or earlier, say while another replica did not answer); one in flight is kept.
        held = {name for name in managed if name in report.states and report.states[name].ready}
        report.managed = held | set(desired) | report.in_flight
        report.failed = {name: error for name, (_, error) in self._failures.items()}
        return report

    @property
    def busy(self) -> bool:
        """A load, unload or wait runs on the replica."""
        return bool(self._in_flight)

    def forget_failures(self, models: Iterable[str]) -> None:
        """The next sync loads these models again though their revision failed here: their files were
        saved again, and what the load missed (a package, a file) may be there now."""
        for name in models:
            self._failures.pop(name, None)

    def heal(
        self,
        desired: Mapping[str, DesiredModel],
        statistics: Mapping[str, ModelStatistics],
        report: ReplicaReport,
        progress: Progress | None = None,
    ) -> None:
        """Start an in-place reload of each desired model whose requests all failed since the last read
        of the statistics (triton/health.py), unless an action on it is in flight, and note what was
        found in the report; a reload's end asks for another sync, as every action's does."""
        for heal in self.healer.decide(
            statistics, {name: model.revision for name, model in desired.items()}, time.monotonic()
        ):
            if heal.model not in self._in_flight:
                self._track(heal.model, asyncio.ensure_future(self._heal(heal, desired[heal.model], progress)))
        report.healed = dict(self.healer.notes)

    async def _heal(self, heal: Heal, model: DesiredModel, progress: Progress | None) -> Outcome:
        outcome = await self._run(Action("heal", heal.model, restart=heal.restart), model, [], progress)
        self.healer.done(heal, outcome.error)
        return outcome

    async def close(self) -> None:
        """Stop waiting for what is in flight (Triton goes on with it) and close the client."""
        for task in self._in_flight.values():
            task.cancel()
        await asyncio.gather(*self._in_flight.values(), return_exceptions=True)
        await self.client.close()

    async def _read(self, names: Iterable[str]) -> dict[str, ModelState]:
        """What the replica says, its configs read only where an earlier read does not still hold.

        Triton's index and statistics carry no revision, and reading the config of every model on
        every pass made a resync pass of a big server hold up an edit landing in it (bench/RESULTS.md).
        A config changes only by a load, and only the operator loads on its replicas (explicit model
        control, the control key): so a config read since the last action of ours on that model,
        while Triton still lists the same version ready, is what it runs. The tenth read longest ago
        is read again each time, and all after an unanswered read, so nothing stays unchecked for long.
        """
        tick = next(self._ticks)
        trusted = sorted((read_at, name) for name, (read_at, _) in self._read_configs.items())
        known = {name: self._read_configs[name][1] for _, name in trusted[math.ceil(len(trusted) / REREAD_SHARE) :]}
        self.reading_since = time.monotonic()
        try:
            states = await self.client.model_states(names, known)
        finally:
            self.reading_since = None
        for name, state in states.items():
            if not state.ready:
                self._read_configs.pop(name, None)
            elif known.get(name) is not state and tick > self._acted.get(name, -1):
                self._read_configs[name] = (tick, state)
        return states

    async def _settle(self, seconds: float | None) -> None:
        if not self._in_flight or seconds == 0:
            return
        self._settling = True
        try:
            await asyncio.wait(list(self._in_flight.values()), timeout=seconds)
        finally:
            self._settling = False

    async def _adopt(
        self, observed: Mapping[str, ModelState], desired: Mapping[str, DesiredModel], managed: set[str]
    ) -> None:
        """On the first sync of a replica (this operator just started), models ours and declared that
        Triton has heard of but has no ready version of: it may still be loading them for the
        operator that ran before. Triton shows nothing else for a model loaded with its files sent
        along: the index lacks it and its config reads "has no available versions" mid-load, after a
        failed load and after an unload alike (measured, docs/triton-facts.md). Such a model is
        waited for, up to `adopt_seconds` (the load timeout), before this operator loads it; a model
        Triton never heard of ("is not found") is loaded at once."""
        candidates = [
            name
            for name in desired
            if name in managed
            and name not in self._in_flight
            and name not in self._failures
            and not (name in observed and observed[name].ready)
        ]
        known = await asyncio.gather(*(self.client.known(name) for name in candidates))
        for name, heard_of in zip(candidates, known, strict=False):
            if heard_of:
                self._track(name, asyncio.ensure_future(self._await_ready(name)))

    async def _await_ready(self, name: str) -> None:
        """Until Triton says the model is ready, or `adopt_seconds` pass (its load then failed, or hangs)."""
        deadline = time.monotonic() + self.adopt_seconds
        while time.monotonic() < deadline:
            try:
                if await self.client.ready(name):
                    return
            except ControlError:
                pass  # an unanswered read: the next one decides
            await asyncio.sleep(READY_POLL_SECONDS)

    def _start(self, actions: Sequence[Action], desired: Mapping[str, DesiredModel], progress: Progress | None) -> None:
        """Start each action as a task; an ensemble's load waits for its steps' actions, and a model's
        unload for the actions in flight on ensembles (that may run it)."""
        for action in actions:
            if action.kind == "unload":
                after = (
                    []
                    if action.model in self._ensembles
                    else [task for name, task in self._in_flight.items() if name in self._ensembles]
                )
            else:
                after = [self._in_flight[step] for step in desired[action.model].composing if step in self._in_flight]
            self._track(
                action.model, asyncio.ensure_future(self._run(action, desired.get(action.model), after, progress))
            )

    def _track(self, name: str, task: asyncio.Task[Outcome | None]) -> None:
        self._in_flight[name] = task
        self._acted_on(name)
        task.add_done_callback(lambda ended: self._ended_one(name, ended))

    def _acted_on(self, name: str) -> None:
        """An action on the model starts or ends: what a read found of its config before may not hold."""
        self._acted[name] = next(self._ticks)
        self._read_configs.pop(name, None)

    def _ended_one(self, name: str, task: asyncio.Task[Outcome | None]) -> None:
        if self._in_flight.get(name) is task:
            del self._in_flight[name]
        self._acted_on(name)
        if task.cancelled():
            return
        outcome = task.result()
        if outcome is not None:
            self._ended.append(outcome)
        if not self._settling and self.on_ended is not None:
            self.on_ended()  # no sync is waiting to report it: ask for one

    async def _run(
        self,
        action: Action,
        model: DesiredModel | None,
        after: list[asyncio.Task[Outcome | None]],
        progress: Progress | None,
    ) -> Outcome:
        await asyncio.gather(*after, return_exceptions=True)
        if progress:
            progress(self.client.url, action, None)
        started = time.monotonic()
        try:
            if action.kind == "unload":
                async with self._unloads:
                    await self.client.unload(action.model, unload_dependents=action.unload_dependents)
            else:
                assert model is not None
                loaded = model.restarted(action.restart) if action.kind == "heal" else model
                async with (
                    self._reload_lock if action.kind in ("reload", "heal") else contextlib.nullcontext(),
                    self._loads,
                ):
                    await self.client.load(loaded)
            outcome = Outcome(action, seconds=time.monotonic() - started, revision=model.revision if model else "")
        except ControlError as error:
            outcome = Outcome(
                action,
                error=error.message,
                seconds=time.monotonic() - started,
                revision=model.revision if model else "",
                interrupted=error.cut or NOT_CONNECTED in error.message,
            )
        if progress:
            progress(self.client.url, action, outcome)
        return outcome

    def _moved_on(self, desired: Mapping[str, DesiredModel], failed: Mapping[str, str]) -> set[str]:
        """Models ready here at another revision after the last sync: their reload needs no read
        first (a load replaces whatever runs), so it starts at once. Ensembles and their steps
        keep the plan's order."""
        steps = {step for model in desired.values() for step in model.composing}
        ready = self._ready or {}
        return {
            name
            for name, model in desired.items()
            if ready.get(name, model.revision) != model.revision
            and failed.get(name) != model.revision
            and not model.composing
            and name not in steps
        }

    def _remember(
        self, outcomes: Sequence[Outcome], desired: Mapping[str, DesiredModel], states: Mapping[str, ModelState]
    ) -> None:
        """Keep failures of loads; forget those whose model is gone or whose revision moved on. A load
        whose call failed but whose model then reads ready at the wanted revision did load (say, one
        that ended just after its call timed out)."""
        for outcome in outcomes:
            name = outcome.action.model
            if outcome.action.kind == "unload":
                continue
            state = states.get(name)
            if outcome.ok or (state is not None and state.ready and state.revision == outcome.revision):
                self._failures.pop(name, None)
            else:
                self._failures[name] = (outcome.revision, outcome.error)
        self._failures = {
            name: (revision, error)
            for name, (revision, error) in self._failures.items()
            if name in desired and desired[name].revision == revision
        }
