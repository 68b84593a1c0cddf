"""What local mode keeps between syncs of its Triton, and the table it prints of it.

Its own module because it is local mode's memory and face, apart from the loop that drives it
(local/runner.py): the last good rendering of each model (a refused file keeps its model serving),
where each was read from, load times and batching figures, and the table that shows them with
Triton's errors, each in full once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from ..api.findings import Finding
from ..api.parse import object_id
from ..api.server import TritonServerSpec
from ..decide.last_good import keep_last_good
from ..protocol.desired import DesiredModel
from ..render.fleet import RenderedServer
from ..render.model_rendering import RenderedModel
from ..sources import Loaded
from ..triton.batching import BatchingSummary, StatisticsTracker
from ..triton.client import ModelState
from ..triton.sync import Outcome, ReplicaReport
from ..triton.sync_plan import Action

KEPT = "its file is refused (see above): the last good version keeps serving"


@dataclass(frozen=True)
class CrashedModel:
    """A model whose load was under way when Triton died: held back at this revision, with Triton's word."""

    revision: str
    why: str


@dataclass
class LocalState:
    """What local mode keeps between syncs."""

    spec: TritonServerSpec | None = None
    models: dict[str, RenderedModel] = field(default_factory=dict)  # object id -> last good rendering
    files: dict[str, str] = field(default_factory=dict)  # object id -> the file it was read from
    kept: set[str] = field(default_factory=set)  # Triton names of models whose file is refused now
    managed: set[str] = field(default_factory=set)
    load_seconds: dict[str, float] = field(default_factory=dict)
    batching: dict[str, BatchingSummary] = field(default_factory=dict)  # model -> its last stats window
    statistics: StatisticsTracker = field(default_factory=StatisticsTracker)
    warned: dict[str, frozenset[str]] = field(default_factory=dict)  # object -> the warnings printed for it last
    noted: set[str] = field(default_factory=set)  # what local mode cannot do that the files ask for, said once
    crashed: dict[str, CrashedModel] = field(default_factory=dict)  # Triton name -> the crash that holds it back

    def to_print(self, findings: list[Finding]) -> list[Finding]:
        """Every error, and an object's warnings only when they differ from those printed for it last: each
        save reread every file, and printed every model's warnings again."""
        warnings: dict[str, frozenset[str]] = {}
        for finding in findings:
            if finding.severity == "warning":
                key = finding.obj or finding.file
                warnings[key] = warnings.get(key, frozenset()) | {f"{finding.where}: {finding.message}"}
        fresh = {key for key, said in warnings.items() if self.warned.get(key) != said}
        self.warned = warnings
        return [f for f in findings if f.severity != "warning" or (f.obj or f.file) in fresh]

    def update(self, loaded: Loaded, server: RenderedServer) -> None:
        """Take the new models; a model refused for errors, or in a file that holds an error or nothing now,
        keeps its last good version."""
        current = {object_id("TritonModel", m.model.metadata): m for m in server.models}
        held = loaded.sources.refused_files | loaded.sources.empty_files
        refused = {obj for obj in self.models if obj in loaded.fleet.refused or self.files.get(obj) in held}
        self.models = keep_last_good(self.models, current, refused)
        kept = self.models.keys() - current.keys()
        self.files = {obj: self.files[obj] for obj in kept} | loaded.sources.origins
        self.kept = {self.models[obj].name for obj in kept}
        revisions = {m.name: m.desired.revision for m in self.models.values()}
        self.crashed = {name: c for name, c in self.crashed.items() if revisions.get(name) == c.revision}

    def desired(self) -> dict[str, DesiredModel]:
        """What Triton should run: every model but those held back for crashing it."""
        return {m.name: m.desired for m in self.models.values() if m.name not in self.crashed}

    def retry(self, names: set[str]) -> None:
        """Load these crashed models again: their files were saved (what killed Triton may be fixed)."""
        for name in names:
            self.crashed.pop(name, None)

    def sources(self) -> dict[str, str]:
        """Each model's source: the CR file, or the repository folder, it is served from."""
        return {model.name: self.files.get(obj, "") for obj, model in self.models.items()}

    def saved(self, touched: set[Path]) -> set[str]:
        """The models one of whose files (its CR file, or a file under its repository folder) was saved."""
        return {
            name
            for name, source in self.sources().items()
            if source and any(path.is_relative_to(Path(source).resolve()) for path in touched)
        }


def one_line(error: str) -> str:
    """An error's first line, marked when there is more: a table row stays one line."""
    first, _, rest = error.strip().partition("\n")
    return f"{first} [whole error below]" if rest.strip() else first


def _state_column(ready: bool, crashed: bool, failed: bool) -> str:
    if crashed:
        return "CRASHED"
    return "READY" if ready else "UNAVAILABLE" if failed else "NOT LOADED"


class Printer:
    def __init__(self, out: TextIO):
        self.out = out
        self.shown: dict[str, str] = {}  # model -> the error of several lines printed whole for it

    def _whole_errors(self, errors: dict[str, str]) -> None:
        """Each error of several lines (Triton's tracebacks) once, on its own, until it changes."""
        for name, error in sorted(errors.items()):
            if "\n" in error.strip() and self.shown.get(name) != error:
                self.line(f"{name}: {error.strip()}")
        self.shown = errors

    def line(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def progress(self, _endpoint: str, action: Action, outcome: Outcome | None) -> None:
        verb = {"load": "loading", "reload": "reloading in place", "unload": "unloading"}[action.kind]
        if outcome is None:
            self.line(f"  {verb} {action.model} ...")
        elif outcome.ok:
            self.line(f"  {action.kind} {action.model}: done in {outcome.seconds:.2f}s")
        else:
            self.line(f"  {action.kind} {action.model}: FAILED: {one_line(outcome.error)}")

    def table(self, report: ReplicaReport, state: LocalState) -> None:
        rows = [("MODEL", "STATE", "VERSION", "REVISION", "LOAD TIME", "BATCH AVG/MAX, QUEUE", "SOURCE", "ERROR")]
        sources = state.sources()
        declared = {model.name for model in state.models.values()}
        errors = {}
        loaded = {name for name, model_state in report.states.items() if model_state.ready}  # by anyone
        for name in sorted(declared | loaded | (report.states.keys() & state.managed)):
            model_state = report.states.get(name, ModelState(name, ready=False))
            seconds = state.load_seconds.get(name)
            crashed = state.crashed.get(name)
            error = (
                (crashed.why if crashed else "")
                or report.failed.get(name)
                or model_state.reason
                or (KEPT if name in state.kept else "")
            )
            if error:
                errors[name] = error
            rows.append(
                (
                    name,
                    _state_column(model_state.ready, crashed is not None, bool(error)),
                    model_state.version or "-",
                    model_state.revision or "-",
                    f"{seconds:.2f}s" if seconds is not None else "-",
                    state.batching[name].column() if name in state.batching else "-",
                    sources.get(name) or "-",
                    one_line(error),
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(7)]
        for row in rows:
            self.line(
                "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[7]]).rstrip()
            )
        self._whole_errors(errors)
        for name, summary in sorted(state.batching.items()):
            if summary.status != "Unknown":
                self.line(f"{name}: {summary.describe()}")
