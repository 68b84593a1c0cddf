"""A replica's sync plan: from what Triton says it runs and what is declared, the loads, reloads and
unloads to make, in the order to run them. Pure (it calls nothing), so it is table-tested; triton/sync.py
reads the replica, runs the plan and remembers what failed.

Rules, from what Triton does (docs/triton-facts.md):
- A changed config or changed files is a reload: `load` with the new config while the old
  version serves. Never unload to change a model (unload-then-load failed 35,327 of 63,129
  requests under load; the in-place reload failed none).
- A revision whose load failed on the replica is not planned again (the caller says which failed).
- Only models the operator put there are unloaded: the caller's `managed` names, and loaded
  models whose config carries the operator's revision parameter. Anything else is left alone.
- Ensembles load after the models they run and unload before them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..protocol.desired import DesiredModel

if TYPE_CHECKING:  # states are read here, never made: the client's module talks gRPC, the plan stays pure
    from .client import ModelState

ActionKind = Literal["load", "reload", "unload", "heal"]  # heal: a reload restarting a model that fails every request


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    model: str
    unload_dependents: bool = False
    restart: int = 0  # a heal's count at this revision, which its config carries


def plan(
    observed: Mapping[str, ModelState],
    desired: Mapping[str, DesiredModel],
    managed: Iterable[str] = (),
    failed: Mapping[str, str] | None = None,
    keep: Iterable[str] = (),
    busy: Collection[str] = (),
) -> list[Action]:
    """The actions that bring a replica from `observed` to `desired`, in the order to run them.

    `failed` maps a model to the revision whose load already failed on this replica; `keep`
    names models to leave as they run (their declaration is refused for now, and a bad
    declaration never unloads a good running version); `busy` names models with a load or unload
    in flight: they get no action until it ends.
    """
    failed = failed or {}
    ours = (set(managed) | {name for name, state in observed.items() if state.revision}) - set(keep) - set(busy)
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
        if failed.get(name) == model.revision or name in busy:
            continue
        if state is None or not state.ready:
            loads.append(Action("load", name))
        elif state.revision != model.revision:
            loads.append(Action("reload", name))
    return unloads + loads
