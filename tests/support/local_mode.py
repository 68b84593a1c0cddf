"""`triton-operator local` as its tests run it: its command line, its log read as it grows, and what
it may leave behind (processes, /dev/shm regions)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.ports import free_ports

SHM = Path("/dev/shm")
REPOSITORY = Path(__file__).resolve().parents[2]  # where `python -m triton_operator.cli` runs from


def local_command(paths: list[Path], workdir: Path, *extra: str) -> list[str]:
    """`triton-operator local` for `paths` on free ports, with Triton's files in `workdir`."""
    http, grpc, metrics = free_ports(3)
    return [
        sys.executable,
        "-m",
        "triton_operator.cli",
        "local",
        *map(str, paths),
        "--http-port",
        str(http),
        "--grpc-port",
        str(grpc),
        "--metrics-port",
        str(metrics),
        "--workdir",
        str(workdir),
        *extra,
    ]


def run_once(paths: list[Path], workdir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`local PATHS --once` run to its end in a session of its own, from the repository's root; it leaves
    behind no process naming `workdir` and no /dev/shm region named after its pid (asserted)."""
    process = subprocess.Popen(
        local_command(paths, workdir, "--once", *extra),
        cwd=REPOSITORY,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = process.communicate(timeout=300)
    assert processes_using(workdir) == []
    assert [name for name in os.listdir(SHM) if name.startswith(f"triton_operator_{process.pid}_")] == []
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def start_local(command: list[str], log: Path) -> tuple[subprocess.Popen[bytes], Output]:
    """`command` (local_command's) started in a session of its own from the repository's root, its
    output into `log`, and that log to wait on."""
    with log.open("w") as out:
        process = subprocess.Popen(
            command, cwd=REPOSITORY, start_new_session=True, stdout=out, stderr=subprocess.STDOUT
        )
    return process, Output(log)


def processes_using(path: Path) -> list[str]:
    """The processes (but this one) whose command line names `path`: "pid: command line" each."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(path) in cmdline and str(os.getpid()) != entry.name:
                found.append(f"{entry.name}: {cmdline}")
    return found


class Output:
    """A log another process writes, waited on for what it says."""

    def __init__(self, path: Path):
        self.path = path

    def wait_for(self, text: str, after: int = 0, timeout: float = 60) -> int:
        return self.wait_for_first((text,), after, timeout)

    def wait_for_first(self, texts: tuple[str, ...], after: int = 0, timeout: float = 60) -> int:
        """The end of whichever of `texts` appears first after `after`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            content = self.path.read_text()
            found = [(index, text) for text in texts if (index := content.find(text, after)) >= 0]
            if found:
                index, text = min(found)
                return index + len(text)
            time.sleep(0.1)
        raise AssertionError(f"none of {texts!r} appeared:\n{self.path.read_text()[after:]}")
