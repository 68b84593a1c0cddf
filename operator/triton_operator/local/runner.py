"""`triton-operator local`: the example CRs served by a real local Triton, kept in sync with the files.

Reads TritonServer/TritonModel YAML (and ConfigMaps holding model files), starts tritonserver
with the flags the renderer writes for a pod, syncs the models through the same control-API
sync the operator uses, says which Triton release it runs (local/versions.py), prints a status table
(local/local_state.py), and watches the files
(local/file_watch.py): an edited model is reloaded in place, a removed one unloaded, a model whose
file became invalid or unreadable keeps running as it was (the table says so). Changed server
settings restart Triton, as a rolling update would replace a pod. If Triton dies while models load,
local mode names them with Triton's own log lines, holds them back until their files or CR change, and
restarts Triton without them; if it exits on its own otherwise, local mode says why and stops with exit
code 2. Its work folder and the key its control API answers to come from local/local_access.py; the
repository its Triton reads is laid out by local/served_repository.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TextIO

from ..api.parse import object_id
from ..api.rollout_spec import effective_rollout
from ..api.server import ModelRepository, TritonServerSpec
from ..render.fleet import Fleet, RenderedServer
from ..repository import repository_as_source
from ..sources import Loaded, Sources, add_read_elsewhere, planned, read_sources
from ..triton.batching import summarize
from ..triton.client import ControlClient, ControlError
from ..triton.load_answers import POLL_FAILURE
from ..triton.sync import Outcome, Progress, Replica, ReplicaReport
from ..triton.sync_plan import Action
from .file_watch import watching
from .local_access import ControlLock, LocalModeError, claimed_workdir, control_lock
from .local_state import CrashedModel, LocalState, Printer
from .samples import send_samples
from .served_repository import lay_out
from .tritonserver import LocalTriton, Ports, TritonFailed
from .versions import running_line, with_hint

# How often the table is checked against Triton: its batching column, and loads or unloads made on Triton's
# control API by others (printed again only when requests came in or a model's state changed).
STATS_SECONDS = 5.0
# Local mode's Triton has no clients to drain: a stop waits this long at most for requests in flight.
LOCAL_EXIT_TIMEOUT_SECONDS = 2
# The most a Triton that logged a fatal signal is waited for: it symbolizes its stack trace, then dies.
DYING_SECONDS = 15


def choose_server(fleet: Fleet, name: str | None) -> RenderedServer:
    """The one TritonServer local mode runs: named with --server, or the only one in the files."""
    servers = [s for s in fleet.servers if name is None or s.server.name == name]
    if len(servers) == 1:
        return servers[0]
    known = ", ".join(s.server.name for s in fleet.servers) or "none"
    refused = sorted(obj.split("/")[-1] for obj in fleet.refused if obj.startswith("TritonServer/"))
    if not servers and refused:
        raise LocalModeError(
            "the TritonServer in the files is refused for the errors above "
            f"({', '.join(refused)}): fix it to run local mode"
        )
    if not servers:
        raise LocalModeError(
            f"no TritonServer {'named ' + repr(name) + ' ' if name else ''}in the files (found: {known})"
        )
    raise LocalModeError(f"the files hold several TritonServers ({known}): choose one with --server")


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


class TritonCrashed(RuntimeError):
    """Our tritonserver died while models loaded: they are held back, and Triton starts again without them."""


def _progress(printer: Printer, triton: LocalTriton) -> Progress:
    """The printer's progress, but a call that failed because Triton died says so, not what the client saw."""

    def said(endpoint: str, action: Action, outcome: Outcome | None) -> None:
        if outcome is not None and not outcome.ok and (status := triton.exit_status()):
            printer.line(f"  {action.kind} {action.model}: tritonserver died during it ({status})")
        else:
            printer.progress(endpoint, action, outcome)

    return said


async def _sync(
    replica: Replica, state: LocalState, printer: Printer, triton: LocalTriton, model_repository: Path | None
) -> ReplicaReport:
    lay_out(triton.model_repository, state.desired().values(), model_repository)
    report = await replica.sync(state.desired(), state.managed, progress=_progress(printer, triton))
    if triton.crash().signalled:  # Triton prints a stack trace before it dies: the load may end first
        await asyncio.to_thread(triton.wait, DYING_SECONDS)
        if not triton.exit_status():  # its signal handler hangs (seen with SIGSEGV): it serves no more
            await asyncio.to_thread(triton.kill)
    _check_alive(triton, state)  # a sync that Triton's death cut short has nothing true to report
    for name, error in report.failed.items():
        if POLL_FAILURE in error and (reason := triton.logged_error(name)):
            error = f"{error}: {reason}"
        report.failed[name] = with_hint(error, triton.version, triton.spec.image)
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


async def _follow_triton(client: ControlClient, state: LocalState, report: ReplicaReport) -> bool:
    """Triton's own word on the models, read again (its index and statistics; a config only for a model newly
    ready): a load or unload made on its control API by someone else shows in the table. True when it changed."""
    try:
        states = await client.model_states(state.desired().keys() | report.managed, known=report.states)
    except ControlError:
        return False  # Triton is restarting or busy: the next read catches up
    if states == report.states:
        return False
    report.states = states
    return True


def _read(
    paths: Sequence[str], server_name: str | None, model_repository: Path | None, state: LocalState
) -> tuple[Loaded, RenderedServer]:
    """The CR files and the model repository's folders (a model both name is the CR's), planned."""
    sources = read_sources(paths) if paths else Sources()
    if model_repository is not None:
        add_read_elsewhere(sources, repository_as_source(model_repository, sources, server_name))
    loaded = planned(sources)
    for finding in state.to_print(loaded.fleet.findings):
        print(finding, file=sys.stderr, flush=True)
    server = choose_server(loaded.fleet, server_name)
    notes = set(cluster_only(server))
    for note in sorted(notes - state.noted):  # each save rereads every file: said once
        print(note, file=sys.stderr, flush=True)
    state.noted |= notes
    if model_repository is None:
        _check_no_repository_needed(server)
    return loaded, server


def cluster_only(server: RenderedServer) -> list[str]:
    """What the files ask for that one local Triton cannot do, said once per model: a canary rollout
    compares pods, and local mode has one."""
    return [
        f"{object_id('TritonModel', m.model.metadata)}: spec.rollout strategy Canary applies in "
        "a cluster only (it judges a new revision on some pods against the others); local mode "
        "runs one Triton and applies every change at once"
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
            f"{', '.join(names)} load{'s' if len(names) == 1 else ''} from TritonServer/{server.server.name}'s "
            f"modelRepository ({where}), which local mode cannot reach: give it a folder holding "
            f"{'that model' if len(names) == 1 else 'those models'} with --model-repository DIR"
        )


def local_spec(spec: TritonServerSpec) -> TritonServerSpec:
    """The server's spec as local mode runs it: models load from its own folder (--model-repository stands in
    for the PVC or bucket), and a stop does not wait out the exit timeout for clients a pod would drain
    (after a failed reload Triton waits the whole timeout, counting down models that never finish)."""
    exit_timeout = min(spec.exit_timeout_seconds, LOCAL_EXIT_TIMEOUT_SECONDS)
    return spec.model_copy(update={"model_repository": ModelRepository(), "exit_timeout_seconds": exit_timeout})


def _check_alive(triton: LocalTriton, state: LocalState) -> None:
    """Stop, and say why, when our tritonserver is gone: never report on a server we do not run. A death
    while declared models loaded is theirs: each is held back at its revision (TritonCrashed)."""
    if not (status := triton.exit_status()):
        return
    crash = triton.crash()
    revisions = {model.name: model.desired.revision for model in state.models.values()}
    culprits = [name for name in crash.loading if name in revisions]
    if not culprits:
        raise TritonFailed(triton.exited())
    named = ", ".join(culprits)
    why = "\n".join([f"tritonserver died ({status}) while loading {named}; its log ({triton.log_path}):", *crash.lines])
    state.crashed |= {name: CrashedModel(revisions[name], why) for name in culprits}
    raise TritonCrashed(f"{why}\nrestarting tritonserver without {named}: loaded again once its files or CR change")


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
    open_control_api: bool = False,
) -> int:
    """Serve the files until stopped; `control_key` None makes a key for the control API, unless
    `open_control_api` leaves every API open."""
    printer = Printer(out)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        with contextlib.ExitStack() as stack:
            workdir = claimed_workdir(
                workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="triton-operator-local-")))
            )
            lock = control_lock(control_key, shm_key, open_control_api, workdir, printer)
            touched: set[Path] = set()
            async with watching(paths, once, stop, touched, model_repository) as changed:
                return await _serve(
                    paths,
                    ports,
                    lock,
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
    lock: ControlLock,
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
    files is saved, changed or not) and check the table against Triton every STATS_SECONDS, until stopped
    or Triton exits; when it dies loading models, start it again without them."""
    state = LocalState()
    loaded, server = _read(paths, server_name, model_repository, state)
    while not stop.is_set():
        state.spec = server.server.spec
        triton = LocalTriton(
            local_spec(state.spec),
            workdir,
            ports,
            lock.key,
            shm_key=lock.shm_key,
            locked=lock.locked,
        )
        gpus = f"GPUs {triton.visible_gpus}" if triton.visible_gpus else "no GPU"
        printer.line(
            f"starting tritonserver for TritonServer/{server.server.name} (gRPC "
            f"{triton.grpc_url}, HTTP {triton.http_url}, {gpus})"
        )
        await asyncio.to_thread(triton.start)
        printer.line(running_line(triton.version, triton.spec.image))
        try:
            async with ControlClient(triton.grpc_url, lock.key) as client:
                replica = Replica(client)
                try:
                    state.managed = set()
                    state.update(loaded, server)
                    synced = await _unless_stopped(stop, _sync(replica, state, printer, triton, model_repository))
                    if synced is None:
                        await replica.close()
                        return 0
                    report = synced
                    if once:
                        samples_ok = await send_samples(triton, client, state, report, printer)
                        _check_alive(triton, state)
                        return 0 if samples_ok and report.ok and not loaded.fleet.errors else 1
                    printer.line("watching the files; Ctrl-C stops")
                    await _read_batching(client, state)
                    next_stats = time.monotonic() + STATS_SECONDS
                    async with _wake_ups(stop, changed, triton) as wake_up:
                        while not stop.is_set():
                            await wake_up(next_stats - time.monotonic())
                            _check_alive(triton, state)
                            if time.monotonic() >= next_stats and not stop.is_set():
                                next_stats = time.monotonic() + STATS_SECONDS
                                requests_came = await _read_batching(client, state)
                                if await _follow_triton(client, state, report) or requests_came:
                                    printer.table(report, state)
                            if not changed.is_set() or stop.is_set():
                                continue
                            changed.clear()
                            saved = set(touched)
                            touched.clear()
                            printer.line("files changed")
                            try:
                                loaded, server = _read(paths, server_name, model_repository, state)
                            except LocalModeError as error:
                                printer.line(f"{error}; keeping what runs")
                                continue
                            if server.server.spec != state.spec:
                                printer.line("server settings changed: restarting tritonserver")
                                break
                            state.update(loaded, server)
                            replica.forget_failures(state.saved(saved))
                            state.retry(state.saved(saved))
                            synced = await _unless_stopped(
                                stop, _sync(replica, state, printer, triton, model_repository)
                            )
                            if synced is None:
                                await replica.close()
                                return 0
                            report = synced
                except TritonCrashed as crash:
                    await replica.close()  # its calls end with the Triton they went to
                    printer.line(str(crash))
                    printer.shown |= {name: crashed.why for name, crashed in state.crashed.items()}  # said once
        finally:
            printer.line("stopping tritonserver")
            await asyncio.to_thread(triton.stop)
    return 0
