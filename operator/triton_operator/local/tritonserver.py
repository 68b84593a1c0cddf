"""A real tritonserver on this machine, from the nvidia-pytriton wheel, run like a pod would run it.

The wheel ships the binary, its libraries, the python backend and one python-backend stub per
Python version. The backend folder is copied into a work folder with the stub for the running
Python (nothing is written into site-packages). Triton runs in its own process group with a
python-backend shm prefix of its own, so stopping it ends every stub process and leaves no
/dev/shm region behind (killing a server mid-load can orphan stubs holding shm, docs/triton-facts.md).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..api.server import TritonServerSpec
from ..protocol.names import CONTROL_PROTOCOLS
from ..render.args import GRPC_PORT, HTTP_PORT, METRICS_PORT, restricted_api_args, server_args
from .crash_log import Crash, crash_in_log

logger = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")
STOP_GRACE_SECONDS = 10
# Triton prints its whole usage (19 kB) after the line naming a flag it refuses, and before the line
# refusing flags that do not go together (docs/triton-facts.md).
USAGE = "Usage: tritonserver [options]"


def _usage_line(line: str) -> bool:
    """A line of Triton's usage text: a flag or its description (indented), a section title, or blank."""
    return line.startswith((" ", "\t")) or not line.strip() or line.rstrip().endswith(":")


class TritonNotInstalled(RuntimeError):
    pass


class TritonFailed(RuntimeError):
    """Our tritonserver cannot start, or stopped on its own: the message says why (status, log tail)."""


@dataclass(frozen=True)
class TritonInstall:
    root: Path  # .../pytriton/tritonserver
    libraries: Path  # .../nvidia_pytriton.libs

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    def stub(self) -> Path:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        stub = self.root / "python_backend_stubs" / version / "triton_python_backend_stub"
        if not stub.exists():
            raise TritonNotInstalled(f"the tritonserver wheel has no python-backend stub for Python {version}")
        return stub

    def backends_in(self, directory: Path) -> Path:
        """A fresh copy of the wheel's backends in `directory`, with the stub for the running Python
        (nothing is written into site-packages); the path for --backend-directory."""
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(self.root / "backends", directory)
        shutil.copy(self.stub(), directory / "python" / "triton_python_backend_stub")
        return directory

    def environment(self, visible_gpus: str) -> dict[str, str]:
        """This process's environment with the wheel's libraries, the running Python first on PATH (the stub
        embeds the Python it finds first, with its packages), and only the GPUs a pod would get."""
        env = dict(os.environ)
        # The stub links the running Python's libpython, which a pyenv or conda Python keeps in its own LIBDIR.
        libpython = sysconfig.get_config_var("LIBDIR")
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            filter(None, [str(self.libraries), libpython, env.get("LD_LIBRARY_PATH")])
        )
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env["CUDA_VISIBLE_DEVICES"] = visible_gpus
        return env

    def check_python_backend(self, env: dict[str, str]) -> None:
        """Refuse to start a Triton whose python models could not run, or would misread tensors: a stub that
        cannot start leaves its model loading for ever, and the stub runs the first python3 on PATH with
        its packages, where numpy 2 makes this backend read every input wrong and answer outputs of 0 bytes
        (add_sub answered `[[11, 22, 33, 44]]` with numpy 1.26 and 0-byte outputs after `pip install
        "numpy>=2,<2.3"` in the same venv, docs/triton-facts.md)."""
        stub = self.stub()
        started = subprocess.run([str(stub)], env=env, capture_output=True, text=True, timeout=60)
        if missing := re.search(r"error while loading shared libraries: ([^:]+)", started.stderr):
            raise TritonFailed(
                f"the python backend's stub for Python {sys.version_info.major}.{sys.version_info.minor} cannot start, "
                f"{missing[1]} is not found: run with a Python built with a shared libpython (pyenv: "
                "PYTHON_CONFIGURE_OPTS=--enable-shared)"
            )
        python = shutil.which("python3", path=env.get("PATH")) or sys.executable
        probe = "try:\n    import numpy\n    print(numpy.__version__)\nexcept ImportError:\n    print('none')"
        # -E: the stub's Python reads no PYTHONPATH (numpy 1.26 put first on it left the stub on numpy 2).
        found = subprocess.run(
            [python, "-E", "-c", probe], env=env, capture_output=True, text=True, timeout=60
        ).stdout.strip()
        if found == "none":
            raise TritonFailed(f"the python backend needs numpy, and {python} has none: pip install 'numpy<2' there")
        if int(found.split(".")[0]) >= 2:
            raise TritonFailed(
                f"the python backend's stub would run with numpy {found} ({python}), which this Triton's python "
                "backend reads wrong (inputs misread, outputs of 0 bytes): pip install 'numpy<2' in that environment"
            )


def host_gpus(environ: Mapping[str, str]) -> list[str]:
    """The GPUs this process may hand on, as CUDA names them: CUDA_VISIBLE_DEVICES where it is set,
    else each GPU the NVIDIA driver knows (its /proc folder, or nvidia-smi's list; none without a driver)."""
    if "CUDA_VISIBLE_DEVICES" in environ:
        return [
            name for name in environ["CUDA_VISIBLE_DEVICES"].split(",") if name.strip() and not name.startswith("-")
        ]
    driver = Path("/proc/driver/nvidia/gpus")
    if driver.is_dir():
        return [str(index) for index in range(len(list(driver.iterdir())))]
    if shutil.which("nvidia-smi") is None:
        return []
    listed = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True, timeout=30).stdout
    return [str(index) for index in range(sum(line.startswith("GPU ") for line in listed.splitlines()))]


def visible_gpus(count: int, host: list[str]) -> str:
    """CUDA_VISIBLE_DEVICES for a tritonserver of `count` GPUs: the first `count` of the host's, as a pod
    gets exactly what it requests ("" hides every GPU)."""
    if count > len(host):
        raise TritonFailed(
            f"gpus.count is {count}, and this host has {len(host) or 'no'} GPU{'s' if len(host) != 1 else ''} to give "
            f"(CUDA_VISIBLE_DEVICES or the NVIDIA driver): lower the server's gpus.count, or run where there are more"
        )
    return ",".join(host[:count])


def find_tritonserver() -> TritonInstall:
    """The wheel's files, found without importing pytriton (whose own client is of no use here): a GPU host
    without network gets the same layout on PYTHONPATH from `make gpu-bundle`."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise TritonNotInstalled(
            "no tritonserver here: install the local extra, e.g. pip install 'triton-operator[local]'"
        )
    package = Path(next(iter(spec.submodule_search_locations)))
    return TritonInstall(root=package / "tritonserver", libraries=package.parent / "nvidia_pytriton.libs")


@dataclass(frozen=True)
class Ports:
    """Triton's own ports by default, the ones its example clients use."""

    http: int = HTTP_PORT
    grpc: int = GRPC_PORT
    metrics: int = METRICS_PORT

    def check_free(self, address: str) -> None:
        """Refuse to start on a port something else listens on at `address`, where Triton will listen
        (requests would reach that server, not ours), or on one port for two of Triton's servers (Triton
        refuses it after its whole usage text). A listener on another loopback address is no owner."""
        named = (("http", self.http), ("grpc", self.grpc), ("metrics", self.metrics))
        for index, (name, port) in enumerate(named):
            for other, other_port in named[index + 1 :]:
                if port == other_port:
                    raise TritonFailed(f"--{name}-port and --{other}-port are both {port}: give each its own port")
        for name, port in named:
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed socket in TIME_WAIT is no owner
                try:
                    probe.bind((address, port))
                except OSError as error:
                    raise TritonFailed(
                        f"port {port} ({name}) is in use ({error.strerror}): choose another with --{name}-port"
                    ) from None


class LocalTriton:
    """One tritonserver process group for one TritonServer spec; use as a context manager."""

    def __init__(
        self,
        spec: TritonServerSpec,
        workdir: Path,
        ports: Ports = Ports(),
        control_key: str | None = None,
        install: TritonInstall | None = None,
        address: str = "127.0.0.1",
        model_repository: Path | None = None,
        auto_complete: bool = False,
        shm_key: str | None = None,
        locked: Sequence[str] = CONTROL_PROTOCOLS,
    ):
        self.spec = spec
        self.workdir = workdir.resolve()
        self.ports = ports
        self.address = address  # a loopback address of its own lets several servers stand in for pods
        self.control_key = control_key
        self.locked = tuple(locked)  # the APIs the control key locks: every administrative one, as in a pod
        # With every administrative API locked, shared memory is too, by a key of its own: one made here
        # unless given (no client of this process then registers shared memory). With fewer, only a given one.
        whole_lock = control_key is not None and self.locked == CONTROL_PROTOCOLS
        self.shm_key = shm_key or (secrets.token_urlsafe(32) if whole_lock else None)
        # Absolute: a python stub given a relative model path looked for it from another directory and the
        # load never ended ("Python model file not found in 'models/add_sub/1/model.py'", `--model-repository models/`).
        self.model_repository = (
            model_repository or workdir / "models"
        ).resolve()  # where models without files load from
        self.install = install or find_tritonserver()
        self.auto_complete = auto_complete  # Triton completes the configs of the models it loads
        self.shm_prefix = f"triton_operator_{os.getpid()}_{secrets.token_hex(4)}_"
        self.log_path = workdir / "tritonserver.log"
        self.log_start = 0  # where this start's lines begin in the log, which every start appends to
        self.visible_gpus = visible_gpus(spec.gpus.count, host_gpus(os.environ))
        self.process: subprocess.Popen[bytes] | None = None
        self.version = ""  # its server metadata's, once started ("2.51.0" for the wheel's)

    @property
    def grpc_url(self) -> str:
        return f"{self.address}:{self.ports.grpc}"

    @property
    def http_url(self) -> str:
        return f"http://{self.address}:{self.ports.http}"

    def args(self) -> list[str]:
        backends = self.workdir / "backends"
        return [
            *server_args(
                self.spec,
                control_key=None,  # locked below, where it may lock fewer APIs than a pod's
                model_repository=str(self.model_repository),
                ports=(self.ports.http, self.ports.grpc, self.ports.metrics),
                auto_complete=self.auto_complete,
            ),
            *(restricted_api_args(self.control_key, self.shm_key, self.locked) if self.control_key else []),
            f"--backend-directory={backends}",
            f"--http-address={self.address}",
            f"--grpc-address={self.address}",
            f"--metrics-address={self.address}",
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
        ]

    def start(self, timeout_seconds: float = 60) -> None:
        self.ports.check_free(self.address)
        self.install.backends_in(self.workdir / "backends")
        self.model_repository.mkdir(parents=True, exist_ok=True)
        env = self.install.environment(self.visible_gpus)
        self.install.check_python_backend(env)
        self.log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [str(self.install.binary), *self.args()],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_seconds
        while not self._live() or self.exited():  # live, and answered by the process we started
            if exited := self.exited():
                self.stop()
                raise TritonFailed(exited)
            if time.monotonic() > deadline:
                self.stop()
                raise TritonFailed(
                    f"tritonserver was not live after {timeout_seconds:.0f}s; the end of its log:\n{self.log_tail()}"
                )
            time.sleep(0.1)
        self.version = self._server_version()

    def wait(self, timeout: float | None = None) -> None:
        """Block until our tritonserver exits (stop() ends it too), or `timeout` seconds pass."""
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)

    def kill(self) -> None:
        """SIGKILL the group (a Triton hung in its signal handler), and wait for it."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def exit_status(self) -> str:
        """How our tritonserver ended ("signal 11 (SIGSEGV)", "status 1"), or "" while it runs."""
        if self.process is None or self.process.poll() is None:
            return ""
        code = self.process.returncode
        return f"signal {-code} ({signal.Signals(-code).name})" if code < 0 else f"status {code}"

    def exited(self) -> str:
        """Why our tritonserver is gone (its exit status and the end of its log), or "" while it runs."""
        if not (status := self.exit_status()):
            return ""
        return (
            f"tritonserver exited with {status}; the end of its log ({self.log_path}):\n{self.log_tail(2000).rstrip()}"
        )

    def crash(self) -> Crash:
        """What this start's log says of its death (crash_in_log)."""
        with self.log_path.open("rb") as log:
            log.seek(self.log_start)
            return crash_in_log(log.read().decode(errors="replace"))

    def _live(self) -> bool:
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"{self.http_url}/v2/health/live", timeout=1) as response:
                status: int = response.status
                return status == 200
        return False

    def _server_version(self) -> str:
        """The version in Triton's server metadata; "" where it does not answer (it exited meanwhile: the
        caller's next look at it says why)."""
        with contextlib.suppress(OSError, ValueError, KeyError):
            with urllib.request.urlopen(f"{self.http_url}/v2", timeout=10) as response:
                return str(json.load(response)["version"])
        return ""

    def log_tail(self, characters: int = 3000) -> str:
        """The whole lines at the end of Triton's log, at most `characters`, without its usage text, which comes
        after the line naming a flag it refuses and before the line of a refusal of the flags together (one port
        for two servers)."""
        if not self.log_path.exists():
            return ""
        lines = self.log_path.read_text(errors="replace").splitlines(keepends=True)
        if USAGE in "".join(lines):
            start = max(index for index, line in enumerate(lines) if line.startswith(USAGE))
            end = start + 1
            while end < len(lines) and _usage_line(lines[end]):
                end += 1
            lines = lines[:start] + lines[end:]
        text = "".join(lines)
        if len(text) <= characters or text[-characters - 1] == "\n":
            return text[-characters:]
        return text[-characters:].partition("\n")[2]

    def logged_error(self, model: str) -> str:
        """Triton's last logged error about a model: a rejected load answers only "failed to poll
        from model repository" and keeps the reason in its log (docs/triton-facts.md)."""
        lines = [line for line in self.log_tail(200_000).splitlines() if line.startswith("E") and model in line]
        return lines[-1].split("] ", 1)[-1].strip('"') if lines else ""

    def stop(self) -> None:
        """SIGTERM the group, wait out Triton's exit timeout, then SIGKILL; remove our shm regions."""
        process, self.process = self.process, None
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=self.spec.exit_timeout_seconds + STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                logger.warning("tritonserver did not stop in time; killing its process group")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # stubs left behind by a failed reload
            process.wait()
        for region in self.shm_regions():
            logger.warning("removing a shared-memory region Triton left behind: %s", region.name)
            region.unlink(missing_ok=True)

    def shm_regions(self) -> list[Path]:
        return sorted(SHM_DIR.glob(f"{self.shm_prefix}*"))

    def __enter__(self) -> LocalTriton:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
