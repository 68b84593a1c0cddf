"""What `local` may touch on a shared machine: the work folder it writes into (one it made, marked so),
and who may control its Triton (a key, made at start unless given, that the control API answers to).

Its own module because both guard the developer against other users and against their own mistakes,
apart from the loop that serves the files (local/runner.py).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from secrets import token_urlsafe

from ..cli.file_writes import replace_file
from ..protocol.names import CONTROL_HEADER, CONTROL_PROTOCOLS, GRPC_CONTROL_METADATA
from .local_state import Printer

# In a work folder local mode made: a folder without it is the user's, and its backends/ is never replaced.
WORKDIR_MARKER = ".triton-operator-local"


# What local mode's own key locks: what runs code or changes the server. Statistics and model configs stay
# open, as inference, metadata and health do, for the developer's tools (a key given with --control-key
# locks what a pod's does).
LOCAL_LOCKED = ("model-repository", "trace", "logging")
# Where the key Triton answers to is saved, for the developer's clients.
CONTROL_KEY_FILE = "control-key"


class LocalModeError(RuntimeError):
    pass


@dataclass(frozen=True)
class ControlLock:
    key: str | None  # None: every API open to local clients
    shm_key: str | None
    locked: tuple[str, ...] = CONTROL_PROTOCOLS


def _cmdline_hidden() -> bool:
    """Whether other users cannot read our processes' command lines (/proc mounted with hidepid)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            _, where, kind, options, *_ = line.split()
            if where == "/proc" and kind == "proc":
                return any(option in options.split(",") for option in ("hidepid=2", "hidepid=invisible"))
    return False


def control_lock(
    control_key: str | None, shm_key: str | None, open_api: bool, workdir: Path, printer: Printer
) -> ControlLock:
    """The key local's Triton answers to: the one given, else one made here (printed once), saved 0600 in the
    workdir for clients; none with --open-control-api. Without a key any user of a shared machine could load
    a model, whose code then runs as the developer."""
    saved = workdir / CONTROL_KEY_FILE
    if open_api:
        saved.unlink(missing_ok=True)
        print(
            "warning: --open-control-api: every user of this machine can load models on this Triton, which runs "
            "their code as you",
            file=sys.stderr,
            flush=True,
        )
        return ControlLock(None, shm_key)
    lock = ControlLock(control_key, shm_key) if control_key else ControlLock(token_urlsafe(32), shm_key, LOCAL_LOCKED)
    replace_file(saved, f"{lock.key}\n".encode(), private=True)
    if not control_key:
        printer.line(
            f"control key for {', '.join(LOCAL_LOCKED)}: {lock.key} (saved in {saved}; send it as HTTP header "
            f"{CONTROL_HEADER}, gRPC metadata {GRPC_CONTROL_METADATA}; --open-control-api opens them)"
        )
    if not _cmdline_hidden():  # Triton takes the key on its command line only
        printer.line(
            "note: other users of this machine can read the key in tritonserver's command line (/proc/PID/cmdline) "
            "unless /proc is mounted with hidepid=2"
        )
    return lock


def claimed_workdir(workdir: Path) -> Path:
    """`workdir` as local mode's own: made (or taken empty) and marked so. Its backends/ is replaced at each
    start, so a folder holding anything local mode did not make is refused: `--workdir .` removed the
    user's own backends/."""
    if workdir.exists() and not workdir.is_dir():
        raise LocalModeError(f"--workdir {workdir} is not a folder: name a new or empty folder")
    marker = workdir / WORKDIR_MARKER
    if marker.is_file():
        return workdir
    if workdir.exists() and any(workdir.iterdir()):
        raise LocalModeError(
            f"--workdir {workdir} holds files local mode did not make (it has no {WORKDIR_MARKER}): name a new or "
            "empty folder, which local mode makes its own"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    marker.write_text("made by `triton-operator local`: its backends/, models/ and tritonserver.log are local's\n")
    return workdir
