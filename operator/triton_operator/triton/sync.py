"""Keep a replica's models as declared: pure planning (observed + desired -> actions), then execution.

Rules, from what Triton does (docs/triton-facts.md):
- A changed config or changed files is a reload: `load` with the new config while the old
  version serves. Never unload to change a model (unload-then-load failed 35,327 of 63,129
  requests under load; the in-place reload failed none).
- A failed load leaves the old version serving; the failure (Triton's text) is reported and the
  same revision is not tried again on that replica until the desired revision changes.
- Only models the operator put there are unloaded: the caller's `managed` names, and loaded
  models whose config carries the operator's revision parameter. Anything else is left alone.
- Reloads on one replica run one at a time: /dev/shm is sized for one model's old and new
  instances side by side (render/shm.py). New loads run in parallel within a bound.
- Ensembles load after the models they run and unload before them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..protocol.desired import DesiredModel
from .batching import ModelStatistics
from .client import ControlClient, ControlError, ModelState
from .health import Healer, restarted_config

ActionKind = Literal["load", "reload", "unload", "heal"]  # heal: a reload restarting a model that fails every request


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    model: str
    unload_dependents: bool = False


def plan(
    observed: Mapping[str, ModelState],
    desired: Mapping[str, DesiredModel],
    managed: Iterable[str] = (),
    failed: Mapping[str, str] | None = None,
    keep: Iterable[str] = (),
) -> list[Action]:
    """The actions that bring a replica from `observed` to `desired`, in the order to run them.

    `failed` maps a model to the revision whose load already failed on this replica; `keep`
    names models to leave as they run (their declaration is refused for now, and a bad
    declaration never unloads a good running version).
    """
    failed = failed or {}
    ours = (set(managed) | {name for name, state in observed.items() if state.revision}) - set(keep)
    unloads = []
    for name in sorted(ours - desired.keys()):
        state = observed.get(name)
        if state is None or not state.ready:
            continue
        # An ensemble's step models go with it, unless some desired model still needs them.
        needed = any(step in desired for step in state.composing)
        unloads.append(Action("unload", name, unload_dependents=bool(state.composing) and not needed))
    unloads.sort(key=lambda action: not observed[action.model].composing)  # ensembles first
    loads = []
    for name, model in sorted(desired.items(), key=lambda item: (bool(item[1].composing), item[0])):
        state = observed.get(name)
        if failed.get(name) == model.revision:
            continue
        if state is None or not state.ready:
            loads.append(Action("load", name))
        elif state.revision != model.revision:
            loads.append(Action("reload", name))
    return unloads + loads


@dataclass(frozen=True)
class Outcome:
    action: Action
    error: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass
class ReplicaReport:
    """What one sync did on one replica and what the replica said afterwards."""

    endpoint: str
    outcomes: list[Outcome] = field(default_factory=list)
    states: dict[str, ModelState] = field(default_factory=dict)
    managed: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)  # model -> Triton's error for its desired revision
    error: str = ""  # the replica itself could not be reached
    key_refused: bool = False  # the replica refused the control key
    healed: dict[str, str] = field(default_factory=dict)  # model -> what was found failing every request, and done about it

    @property
    def ok(self) -> bool:
        return not self.error and not self.failed


Progress = Callable[[str, Action, Outcome | None], None]


def _changed_by(actions: Iterable[Action], observed: Mapping[str, ModelState]) -> set[str]:
    """The models whose state the actions may have changed: their own, and the steps of an ensemble
    unloaded with its dependents. Only these are read again after a sync; the others stay as read
    just before it (reading all again doubled the time of a one-model change on 100 models)."""
    changed = set()
    for action in actions:
        changed.add(action.model)
        if action.unload_dependents:
            changed |= set(observed[action.model].composing)
    return changed


class Replica:
    """One Triton endpoint and what the sync remembers about it (failed revisions, revisions last seen ready)."""

    def __init__(self, client: ControlClient, parallel_loads: int = 4):
        self.client = client
        self.parallel_loads = parallel_loads
        self._failures: dict[str, tuple[str, str]] = {}  # model -> (revision that failed, Triton's error)
        self._ready: dict[str, str] = {}  # model -> the revision it was ready at after the last sync
        self._reload_lock = asyncio.Lock()  # reloads run one at a time: /dev/shm holds one reload's overlap
        self.healer = Healer()

    async def sync(
        self,
        desired: Mapping[str, DesiredModel],
        managed: Iterable[str] = (),
        progress: Progress | None = None,
        keep: Iterable[str] = (),
    ) -> ReplicaReport:
        managed = set(managed)
        report = ReplicaReport(self.client.url, managed=managed | set(desired))
        failed_revisions = {name: revision for name, (revision, _) in self._failures.items()}
        moved = self._moved_on(desired, failed_revisions)
        early = [Action("reload", name) for name in sorted(moved)]
        reloading = asyncio.ensure_future(self._execute(early, desired, progress))  # while the rest is read
        try:
            observed = await self.client.model_states((desired.keys() | managed) - moved)
            rest = {name: model for name, model in desired.items() if name not in moved}
            actions = plan(observed, rest, managed - moved, failed_revisions, keep)
            report.outcomes = await reloading + await self._execute(actions, desired, progress)
            actions = early + actions
            report.states = observed | await self.client.model_states(_changed_by(actions, observed)) if actions else observed
        except ControlError as error:
            self._ready = {}
            report.error = error.message
            report.key_refused = error.key_refused
            return report
        finally:
            reloading.cancel()  # still running only when something above failed
        self._ready = {name: state.revision for name, state in report.states.items() if state.ready}
        self._remember(report.outcomes, desired, report.states)
        # What this replica may still hold of ours: a managed model it no longer has is forgotten here
        # (unloaded now, or earlier, say while another replica did not answer).
        report.managed = {name for name in managed if name in report.states and report.states[name].ready} | set(desired)
        report.failed = {name: error for name, (_, error) in self._failures.items()}
        return report

    async def heal(self, desired: Mapping[str, DesiredModel], statistics: Mapping[str, ModelStatistics], report: ReplicaReport, progress: Progress | None = None) -> None:
        """Reload, in place, the desired models whose requests all failed since the last read of the
        statistics (triton/health.py), and note it in the report."""
        heals = self.healer.decide(statistics, {name: model.revision for name, model in desired.items()}, time.monotonic())
        for heal in heals:
            action, model, started = Action("heal", heal.model), desired[heal.model], time.monotonic()
            if progress:
                progress(self.client.url, action, None)
            try:
                async with self._reload_lock:
                    await self.client.load(model.name, restarted_config(model.config_json, heal.restart), model.files, model.load_timeout_seconds)
                outcome = Outcome(action, seconds=time.monotonic() - started)
            except ControlError as error:
                outcome = Outcome(action, error=error.message, seconds=time.monotonic() - started)
            self.healer.done(heal, outcome.error)
            report.outcomes.append(outcome)
            if progress:
                progress(self.client.url, action, outcome)
        report.healed = dict(self.healer.notes)

    def _moved_on(self, desired: Mapping[str, DesiredModel], failed: Mapping[str, str]) -> set[str]:
        """Models ready here at another revision after the last sync: their reload needs no read
        first (a load replaces whatever runs), so it starts at once. Ensembles and their steps
        keep the plan's order."""
        steps = {step for model in desired.values() for step in model.composing}
        return {
            name
            for name, model in desired.items()
            if self._ready.get(name, model.revision) != model.revision
            and failed.get(name) != model.revision
            and not model.composing
            and name not in steps
        }

    def _remember(self, outcomes: Sequence[Outcome], desired: Mapping[str, DesiredModel], states: Mapping[str, ModelState]) -> None:
        """Keep failures of loads; forget those whose model is gone or whose revision moved on. A load
        Triton answered with an error but whose model then reads ready at the wanted revision did
        load: an ensemble whose steps came with their files is answered "failed to poll from model
        repository" (Triton looks for the steps there too) and serves all the same."""
        for outcome in outcomes:
            name = outcome.action.model
            if outcome.action.kind == "unload":
                continue
            state = states.get(name)
            if outcome.ok or (state is not None and state.ready and state.revision == desired[name].revision):
                self._failures.pop(name, None)
            else:
                self._failures[name] = (desired[name].revision, outcome.error)
        self._failures = {
            name: (revision, error)
            for name, (revision, error) in self._failures.items()
            if name in desired and desired[name].revision == revision
        }

    async def _execute(self, actions: list[Action], desired: Mapping[str, DesiredModel], progress: Progress | None) -> list[Outcome]:
        limit = asyncio.Semaphore(self.parallel_loads)

        async def run(action: Action) -> Outcome:
            if progress:
                progress(self.client.url, action, None)
            started = time.monotonic()
            try:
                if action.kind == "unload":
                    await self.client.unload(action.model, unload_dependents=action.unload_dependents)
                else:
                    model = desired[action.model]
                    async with limit:
                        if action.kind == "reload":
                            async with self._reload_lock:
                                await self.client.load(model.name, model.config_json, model.files, model.load_timeout_seconds)
                        else:
                            await self.client.load(model.name, model.config_json, model.files, model.load_timeout_seconds)
                outcome = Outcome(action, seconds=time.monotonic() - started)
            except ControlError as error:
                outcome = Outcome(action, error=error.message, seconds=time.monotonic() - started)
            if progress:
                progress(self.client.url, action, outcome)
            return outcome

        outcomes = [await run(a) for a in actions if a.kind == "unload"]
        models = [a for a in actions if a.kind != "unload" and not desired[a.model].composing]
        outcomes += await asyncio.gather(*(run(a) for a in models))
        outcomes += [await run(a) for a in actions if a.kind != "unload" and desired[a.model].composing]
        return outcomes

