"""`triton-operator local`: the example CRs served by a real local Triton, kept in sync with the files.

Reads TritonServer/TritonModel YAML (and ConfigMaps holding model files), starts tritonserver
with the flags the renderer writes for a pod, syncs the models through the same control-API
sync the operator uses, prints a status table, and watches the files (inotify, so an edit is
acted on as it is saved, not at the next poll): an edited model is reloaded in place, a removed one unloaded, a model whose file became invalid or unreadable keeps
running as it was (the table says so). Changed server settings restart Triton, as a rolling update
would replace a pod. If Triton exits on its own, local mode says why and stops with exit code 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import tritonclient.grpc.aio as grpcclient
from watchfiles import Change, awatch

from ..api.parse import object_id
from ..api.rollout import effective_rollout
from ..api.server import ModelRepository, TritonServerSpec
from ..decide.last_good import keep_last_good
from ..protocol.desired import DesiredModel
from ..render.fleet import Fleet, RenderedServer
from ..render.model_rendering import RenderedModel
from ..repository import SKIPPED_FOLDERS, repository_as_source
from ..sources import YAML_SUFFIXES, Loaded, Sources, add_read_elsewhere, planned, read_sources
from ..triton.batching import BatchingSummary, StatisticsTracker, summarize
from ..triton.client import ControlClient, ControlError, ModelState
from ..triton.sync import Outcome, Replica, ReplicaReport
from ..triton.sync_plan import Action
from .samples import send_sample
from .tritonserver import LocalTriton, Ports, TritonFailed

# Triton's answer to a load it rejected for a reason it only logs.
POLL_FAILURE = "failed to poll from model repository"
KEPT = "its file is refused (see above): the last good version keeps serving"
# How often the table's batching column is refreshed (printed only when requests came in).
STATS_SECONDS = 5.0
# Local mode's Triton has no clients to drain: a stop waits this long at most for requests in flight.
LOCAL_EXIT_TIMEOUT_SECONDS = 2
# Changes to the files are acted on once they have been quiet this long: a save (even one written
# in several steps) is one change, and is acted on 10 ms after it, not watchfiles' default 50 ms.
QUIET_MS = 10


class LocalModeError(RuntimeError):
    pass


def choose_server(fleet: Fleet, name: str | None) -> RenderedServer:
    """The one TritonServer local mode runs: named with --server, or the only one in the files."""
    servers = [s for s in fleet.servers if name is None or s.server.name == name]
    if len(servers) == 1:
        return servers[0]
    known = ", ".join(s.server.name for s in fleet.servers) or "none"
    refused = sorted(obj.split("/")[-1] for obj in fleet.refused if obj.startswith("TritonServer/"))
    if not servers and refused:
        raise LocalModeError(
            f"the TritonServer in the files is refused for the errors above ({', '.join(refused)}): fix it to run local mode"
        )
    if not servers:
        raise LocalModeError(
            f"no TritonServer {'named ' + repr(name) + ' ' if name else ''}in the files (found: {known})"
        )
    raise LocalModeError(f"the files hold several TritonServers ({known}): choose one with --server")


async def watch_files(
    paths: Sequence[str],
    changed: asyncio.Event,
    stop: asyncio.Event,
    touched: set[Path] | None = None,
    repository: Path | None = None,
) -> None:
    """Set `changed` whenever a named file, or a YAML file or a folder under a named folder, or any file of
    the model `repository` (but Python's caches), is written, created, moved or removed, until `stop` is set;
    each such path is added to `touched`, a save that changes nothing too. Folders are watched with their subfolders; a named file
    through its folder alone, so an editor that saves by replacing the file is still seen. A folder moved in
    or out is one event for the folder (none for the files in it), so folders are known by name: a removed
    path is a folder if one was seen there."""
    repository = repository.resolve() if repository else None
    named: list[str | Path] = [*paths, *([repository] if repository else [])]
    folders = [Path(p).resolve() for p in named if Path(p).is_dir()]
    files = {Path(p).resolve() for p in paths if not Path(p).is_dir()}
    subfolders = {path for folder in folders for path in folder.rglob("*") if path.is_dir()}

    def ours(change: Change, name: str) -> bool:
        path = Path(name).resolve()
        if path in files:
            return True
        if not any(path.is_relative_to(folder) for folder in folders):
            return False
        if repository and path.is_relative_to(repository) and SKIPPED_FOLDERS & set(path.relative_to(repository).parts):
            return False  # Triton's python stub writes model.py's bytecode there as it loads it
        if change == Change.added and path.is_dir():
            subfolders.update({path, *(sub for sub in path.rglob("*") if sub.is_dir())})
            return True
        if change == Change.deleted and path in subfolders:
            subfolders.difference_update({sub for sub in subfolders if sub.is_relative_to(path)})
            return True
        if repository and path.is_relative_to(repository):
            return True
        return path.suffix in YAML_SUFFIXES and not path.is_dir()

    async def watch(roots: Sequence[Path], recursive: bool) -> None:
        async for batch in awatch(*roots, watch_filter=ours, recursive=recursive, step=QUIET_MS, stop_event=stop):
            if touched is not None:
                touched.update(Path(name).resolve() for _, name in batch)
            changed.set()

    parents = sorted({file.parent for file in files if file.parent.is_dir()})
    await asyncio.gather(
        *(watch(roots, recursive) for roots, recursive in ((folders, True), (parents, False)) if roots)
    )


@contextlib.asynccontextmanager
async def _watching(
    paths: Sequence[str], once: bool, stop: asyncio.Event, touched: set[Path], repository: Path | None
) -> AsyncIterator[asyncio.Event]:
    """An event set on every change of the files while in the block (never with --once); the paths saved go
    into `touched`. Watching starts before Triton does: an edit saved while it starts is acted on once it runs."""
    changed, stop_watching = asyncio.Event(), asyncio.Event()
    if once:
        yield changed
        return
    watcher = asyncio.create_task(watch_files(paths, changed, stop_watching, touched, repository))
    watcher.add_done_callback(
        lambda _: stop.set()
    )  # a watch that ends by itself (say, the inotify limit) ends local mode; its error is raised below
    try:
        yield changed
    finally:
        stop_watching.set()
        await watcher


@contextlib.asynccontextmanager
async def _wake_ups(
    stop: asyncio.Event, changed: asyncio.Event, triton: LocalTriton
) -> AsyncIterator[Callable[[float], Awaitable[None]]]:
    """A wait that ends as soon as local mode is asked to stop, the files change or our Triton exits
    (events, not polls), or after a timeout."""
    stopped = asyncio.ensure_future(stop.wait())
    triton_exited = asyncio.ensure_future(
        asyncio.to_thread(triton.wait)
    )  # returns once Triton is stopped, if not before
    files_changed = asyncio.ensure_future(changed.wait())

    async def wait(timeout: float) -> None:
        nonlocal files_changed
        if files_changed.done():  # seen and cleared: wait for the next change
            files_changed = asyncio.ensure_future(changed.wait())
        await asyncio.wait(
            [stopped, files_changed, triton_exited], timeout=max(timeout, 0), return_when=asyncio.FIRST_COMPLETED
        )

    try:
        yield wait
    finally:
        stopped.cancel()
        files_changed.cancel()


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

    def update(self, loaded: Loaded, server: RenderedServer) -> None:
        """Take the new models; a model refused for errors, or in a file that holds an error or nothing now, keeps its last good version."""
        current = {object_id("TritonModel", m.model.metadata): m for m in server.models}
        held = loaded.sources.refused_files | loaded.sources.empty_files
        refused = {obj for obj in self.models if obj in loaded.fleet.refused or self.files.get(obj) in held}
        self.models = keep_last_good(self.models, current, refused)
        kept = self.models.keys() - current.keys()
        self.files = {obj: self.files[obj] for obj in kept} | loaded.sources.origins
        self.kept = {self.models[obj].name for obj in kept}

    def desired(self) -> dict[str, DesiredModel]:
        return {m.name: m.desired for m in self.models.values()}

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
        for name in sorted(declared | (report.states.keys() & state.managed)):
            model_state = report.states.get(name, ModelState(name, ready=False))
            seconds = state.load_seconds.get(name)
            error = report.failed.get(name) or model_state.reason or (KEPT if name in state.kept else "")
            if error:
                errors[name] = error
            rows.append(
                (
                    name,
                    "READY" if model_state.ready else "UNAVAILABLE" if error else "NOT LOADED",
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


async def _sync(replica: Replica, state: LocalState, printer: Printer, triton: LocalTriton) -> ReplicaReport:
    report = await replica.sync(state.desired(), state.managed, progress=printer.progress)
    for name, error in report.failed.items():
        if POLL_FAILURE in error and (reason := triton.logged_error(name)):
            report.failed[name] = f"{error}: {reason}"
    state.managed = report.managed
    for outcome in report.outcomes:
        if outcome.ok and outcome.action.kind != "unload":
            state.load_seconds[outcome.action.model] = outcome.seconds
            state.batching.pop(outcome.action.model, None)  # a reload starts its counters over
    if report.error:
        printer.line(f"Triton did not answer: {report.error}")
    printer.table(report, state)
    return report


async def _read_batching(client: ControlClient, state: LocalState) -> bool:
    """Each declared model's batching since the last read; True when requests came in."""
    try:
        counters = await client.statistics()
    except ControlError:
        return False  # Triton is restarting or busy: the next read catches up
    configs = {model.name: model.desired.parsed_config() for model in state.models.values() if model.name in counters}
    state.statistics.retain(configs)
    windows = {name: state.statistics.read(name, counters[name]) for name in configs}
    state.batching = {name: summarize(name, configs[name], window) for name, window in windows.items()}
    return any(window.seconds is not None and window.stats.requests for window in windows.values())


def _read(
    paths: Sequence[str], server_name: str | None, model_repository: Path | None
) -> tuple[Loaded, RenderedServer]:
    """The CR files and the model repository's folders (a model both name is the CR's), planned."""
    sources = read_sources(paths) if paths else Sources()
    if model_repository is not None:
        add_read_elsewhere(sources, repository_as_source(model_repository, sources, server_name))
    loaded = planned(sources)
    for finding in loaded.fleet.findings:
        print(finding, file=sys.stderr, flush=True)
    server = choose_server(loaded.fleet, server_name)
    for note in cluster_only(server):
        print(note, file=sys.stderr, flush=True)
    if model_repository is None:
        _check_no_repository_needed(server)
    return loaded, server


def cluster_only(server: RenderedServer) -> list[str]:
    """What the files ask for that one local Triton cannot do, said once per model: a canary rollout
    compares pods, and local mode has one."""
    return [
        f"{object_id('TritonModel', m.model.metadata)}: spec.rollout strategy Canary applies in a cluster only (it judges a "
        "new revision on some pods against the others); local mode runs one Triton and applies every change at once"
        for m in server.models
        if effective_rollout(m.model.spec.rollout, server.server.spec.rollout).strategy == "Canary"
    ]


def _check_no_repository_needed(server: RenderedServer) -> None:
    """Models without files load from the server's modelRepository, a PVC or a bucket local mode cannot
    reach: say so before Triton answers 'model not found', and what stands in for it."""
    names = sorted(m.name for m in server.models if m.model.spec.files is None and not m.desired.composing)
    if names:
        repository = server.server.spec.model_repository
        where = f"PersistentVolumeClaim '{repository.pvc.claim_name}'" if repository.pvc else repository.uri
        raise LocalModeError(
            f"{', '.join(names)} load{'s' if len(names) == 1 else ''} from TritonServer/{server.server.name}'s modelRepository "
            f"({where}), which local mode cannot reach: give it a folder holding {'that model' if len(names) == 1 else 'those models'} "
            "with --model-repository DIR"
        )


def local_spec(spec: TritonServerSpec) -> TritonServerSpec:
    """The server's spec as local mode runs it: models load from its own folder (--model-repository stands in
    for the PVC or bucket), and a stop does not wait out the exit timeout for clients a pod would drain
    (after a failed reload Triton waits the whole timeout, counting down models that never finish)."""
    exit_timeout = min(spec.exit_timeout_seconds, LOCAL_EXIT_TIMEOUT_SECONDS)
    return spec.model_copy(update={"model_repository": ModelRepository(), "exit_timeout_seconds": exit_timeout})


def _check_alive(triton: LocalTriton) -> None:
    """Stop, and say why, when our tritonserver is gone: never report on a server we do not run."""
    if exited := triton.exited():
        raise TritonFailed(exited)


async def _samples(triton: LocalTriton, state: LocalState, report: ReplicaReport, printer: Printer) -> bool:
    ok = True
    async with grpcclient.InferenceServerClient(triton.grpc_url) as client:
        for model in sorted(state.models.values(), key=lambda m: m.name):
            name = model.name
            if not report.states.get(name, ModelState(name, False)).ready:
                printer.line(f"sample {name}: not ready")
                ok = False
                continue
            result = await send_sample(client, model, triton.model_repository / name)
            ok = ok and not result.startswith("failed")
            printer.line(f"sample {name}: {result}")
    return ok


async def run_local(
    paths: Sequence[str],
    ports: Ports = Ports(),
    control_key: str | None = None,
    server_name: str | None = None,
    once: bool = False,
    workdir: Path | None = None,
    out: TextIO = sys.stdout,
    model_repository: Path | None = None,
    shm_key: str | None = None,
) -> int:
    printer = Printer(out)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        with contextlib.ExitStack() as stack:
            workdir = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="triton-operator-local-")))
            touched: set[Path] = set()
            async with _watching(paths, once, stop, touched, model_repository) as changed:
                return await _serve(
                    paths,
                    ports,
                    (control_key, shm_key),
                    server_name,
                    once,
                    workdir,
                    model_repository,
                    printer,
                    stop,
                    changed,
                    touched,
                )
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


async def _unless_stopped(stop: asyncio.Event, sync: Awaitable[ReplicaReport]) -> ReplicaReport | None:
    """The sync's report, or None when local mode is asked to stop first: a load may take minutes, and
    Ctrl-C is answered at once (the sync is cancelled; stopping Triton ends what it was loading)."""
    syncing, stopped = asyncio.ensure_future(sync), asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([syncing, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if syncing.done():
        return syncing.result()
    syncing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await syncing
    return None


async def _serve(
    paths: Sequence[str],
    ports: Ports,
    keys: tuple[str | None, str | None],
    server_name: str | None,
    once: bool,
    workdir: Path,
    model_repository: Path | None,
    printer: Printer,
    stop: asyncio.Event,
    changed: asyncio.Event,
    touched: set[Path],
) -> int:
    """Start Triton and sync; then act on each change of the files (restarting Triton when the
    server's settings change; a model whose revision failed to load is tried again when one of its
    files is saved, changed or not) and refresh the batching column every STATS_SECONDS, until stopped
    or Triton exits. `keys`: the control key (None: every API open to local clients) and the shared-memory key."""
    control_key, shm_key = keys
    state = LocalState()
    loaded, server = _read(paths, server_name, model_repository)
    while not stop.is_set():
        state.spec = server.server.spec
        triton = LocalTriton(
            local_spec(state.spec), workdir, ports, control_key, model_repository=model_repository, shm_key=shm_key
        )
        gpus = f"GPUs {triton.visible_gpus}" if triton.visible_gpus else "no GPU"
        printer.line(
            f"starting tritonserver for TritonServer/{server.server.name} (gRPC {triton.grpc_url}, HTTP {triton.http_url}, {gpus})"
        )
        await asyncio.to_thread(triton.start)
        try:
            async with ControlClient(triton.grpc_url, control_key) as client:
                replica = Replica(client)
                state.managed = set()
                state.update(loaded, server)
                synced = await _unless_stopped(stop, _sync(replica, state, printer, triton))
                if synced is None:
                    await replica.close()
                    return 0
                report = synced
                _check_alive(triton)
                if once:
                    samples_ok = await _samples(triton, state, report, printer)
                    _check_alive(triton)
                    return 0 if samples_ok and report.ok and not loaded.fleet.errors else 1
                printer.line("watching the files; Ctrl-C stops")
                await _read_batching(client, state)
                next_stats = time.monotonic() + STATS_SECONDS
                async with _wake_ups(stop, changed, triton) as wake_up:
                    while not stop.is_set():
                        await wake_up(next_stats - time.monotonic())
                        _check_alive(triton)
                        if time.monotonic() >= next_stats and not stop.is_set():
                            next_stats = time.monotonic() + STATS_SECONDS
                            if await _read_batching(client, state):
                                printer.table(report, state)
                        if not changed.is_set() or stop.is_set():
                            continue
                        changed.clear()
                        saved = set(touched)
                        touched.clear()
                        printer.line("files changed")
                        try:
                            loaded, server = _read(paths, server_name, model_repository)
                        except LocalModeError as error:
                            printer.line(f"{error}; keeping what runs")
                            continue
                        if server.server.spec != state.spec:
                            printer.line("server settings changed: restarting tritonserver")
                            break
                        state.update(loaded, server)
                        replica.forget_failures(state.saved(saved))
                        synced = await _unless_stopped(stop, _sync(replica, state, printer, triton))
                        if synced is None:
                            await replica.close()
                            return 0
                        report = synced
                        _check_alive(triton)
        finally:
            printer.line("stopping tritonserver")
            await asyncio.to_thread(triton.stop)
    return 0
