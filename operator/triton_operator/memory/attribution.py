"""What each model of a pod costs in host memory, from a snapshot of the pod's processes.

Triton cannot be asked: its statistics carry `memory_usage` only for backends that report it, and the
python backend never does (its library does not import Triton's report functions), and its metrics'
`nv_cpu_memory_used_bytes` is the host's, not a model's (docs/triton-facts.md). A python model's
instances are processes of their own, the stubs, so a reader that shares the pod's process namespace
sees them in /proc; this module is that reading (`read_stubs`), the table it serves read back by the
operator (`parse_table`, whatever answered), and its attribution to models (`model_memory`, pure).

A stub's command line (one line, its arguments in this order), as the wheel's tritonserver 2.51
starts it:

    triton_python_backend_stub MODEL_FILE SHM_REGION SHM_SIZE SHM_GROWTH TRITON_PID BACKEND_DIR
        IPC_HANDLE INSTANCE RUNTIME

- MODEL_FILE is `<folder>/<version>/model.py`: the model's folder in the repository
  (`<repository>/<model>/1/model.py`), or a temporary folder of its own when it was loaded with its
  files in the request (`/tmp/folderAbC123/1/model.py`). Every stub of one load shares it.
- INSTANCE is `<group>_<k>`: the instance group's name (Triton names an unnamed group `<model>_<index>`,
  and the one group of a config without any `<model>`) and the instance's index in it.

So a model's stubs are those of one model file whose group names are the model's; a folder named by
the model settles it when two models name a group alike. What a model costs is its stubs' private
memory: the interpreter and numpy they map are shared by every stub of the pod and counted once in
Triton's own baseline (render/placement.py). Its GPU memory, where the sidecar can see the GPUs, is
what NVML says its stubs hold (memory/nvml.py); a model on a GPU is a stub with a CUDA context of its
own, so that figure includes the context.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..protocol.triton_proto import model_config_pb2 as pb
from .nvml import holds_nvidia_device

STUB = "triton_python_backend_stub"
READER_PATH = "/stubs"
_MODEL_FILE, _INSTANCE = 1, 8  # positions in a stub's command line
_KIB_LINE = re.compile(r"^(\w+):\s+(\d+) kB$", re.MULTILINE)
TRITONSERVER = "tritonserver"  # the name the kernel gives Triton's process (its executable's), a stub's parent
TABLE_DEPTH = 4  # {"stubs": [{"cmdline": [...]}]}
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_JSON_PAIR = re.compile(rb"\[\]|\{\}")
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))


@dataclass(frozen=True)
class StubProcess:
    """One python stub as /proc shows it."""

    pid: int
    cmdline: tuple[str, ...]
    rss_bytes: int
    private_bytes: int
    gpu_bytes: int | None = None  # device memory over every GPU; None: unknown (no GPU seen, or NVML could not say)

    def to_json(self) -> dict[str, Any]:
        known = {"gpuBytes": self.gpu_bytes} if self.gpu_bytes is not None else {}
        return {
            "pid": self.pid,
            "cmdline": list(self.cmdline),
            "rssBytes": self.rss_bytes,
            "privateBytes": self.private_bytes,
            **known,
        }

    @classmethod
    def from_json(cls, data: Any) -> StubProcess:
        """One entry of the sidecar's table (without gpuBytes from a sidecar that saw no GPU); a ValueError
        naming what is wrong on anything else: what answers on the pod's port need not be our sidecar."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a stub is not an object but {type(data).__name__}")
        cmdline = data.get("cmdline")
        if not (isinstance(cmdline, list) and all(isinstance(word, str) for word in cmdline) and is_stub(cmdline)):
            raise ValueError("a stub's cmdline is not a python stub's command line (a list of strings)")
        gpu = data.get("gpuBytes")
        return cls(
            _count(data, "pid"),
            tuple(cmdline),
            _count(data, "rssBytes"),
            _count(data, "privateBytes"),
            None if gpu is None else _count(data, "gpuBytes"),
        )

    @property
    def model_file(self) -> str:
        return self.cmdline[_MODEL_FILE]

    @property
    def group(self) -> str:
        return self.cmdline[_INSTANCE].rpartition("_")[0]


@dataclass(frozen=True)
class ModelMemory:
    """What one model's stubs hold on a pod."""

    instances: int
    private_bytes: int
    rss_bytes: int
    gpu_bytes: int | None = None  # None: some stub's GPU memory is unknown


MeasuredPart = tuple[int, str]  # bytes, and when they were measured (as a status says it)


@dataclass(frozen=True)
class MeasuredMemory:
    """What a model was measured to hold on a pod, part by part; None where nothing measured that part
    (it stays as declared)."""

    cpu: MeasuredPart | None = None
    gpu: MeasuredPart | None = None

    @property
    def measured_at(self) -> str:
        """The later of the parts' times: the figure as a whole is as recent as that."""
        return max(part[1] for part in (self.cpu, self.gpu) if part is not None)


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"a stub's {key} is not a whole number of at least 0: {str(value)[:40]}")
    return value


def parse_table(body: bytes) -> list[StubProcess]:
    """The sidecar's answer (`{"stubs": [...]}`, StubProcess.to_json's entries); a ValueError naming what is
    wrong with anything else. Its nesting is checked before it is parsed: the parser recurses once a
    level, and a body nested 100,000 deep would end the recursion with an error of its own."""
    if not _nests_within(body, TABLE_DEPTH):
        raise ValueError(f"its arrays and objects nest deeper than the table's {TABLE_DEPTH} levels, or do not pair")
    try:
        table = json.loads(body)
    except ValueError as error:  # UnicodeDecodeError too
        raise ValueError(f"it is not JSON ({str(error)[:80]})") from None
    stubs = table.get("stubs") if isinstance(table, dict) else None
    if not isinstance(stubs, list):
        raise ValueError('it is not a table {"stubs": [...]}')
    return [StubProcess.from_json(entry) for entry in stubs]


def _nests_within(body: bytes, levels: int) -> bool:
    """Whether JSON text's arrays and objects pair up and nest `levels` deep at most: its brackets outside
    strings, with the innermost pairs taken away once a level (a few scans of the text, with no loop of
    Python's over its brackets), leave nothing."""
    brackets = _JSON_STRING.sub(b"", body).translate(None, delete=_NOT_BRACKETS)
    for _ in range(levels):
        brackets = _JSON_PAIR.sub(b"", brackets)
    return not brackets


def is_stub(cmdline: Iterable[str]) -> bool:
    words = list(cmdline)
    return len(words) > _INSTANCE and PurePosixPath(words[0]).name == STUB


def instance_group_names(model: str, config: pb.ModelConfig) -> list[str]:
    """The names Triton gives the model's instance groups (as its config reads back after the load)."""
    if not config.instance_group:
        return [model]
    return [group.name or f"{model}_{index}" for index, group in enumerate(config.instance_group)]


def model_memory(stubs: Iterable[StubProcess], configs: Mapping[str, pb.ModelConfig]) -> dict[str, ModelMemory]:
    """Each loaded model's stubs summed, for the models in `configs` (name -> config as loaded); stubs of a
    model not there (one loading, one left behind) are counted for none."""
    models_of_group: dict[str, set[str]] = defaultdict(set)
    for model, config in configs.items():
        for group in instance_group_names(model, config):
            models_of_group[group].add(model)
    by_file: dict[str, list[StubProcess]] = defaultdict(list)
    for stub in stubs:
        by_file[stub.model_file].append(stub)
    found: dict[str, ModelMemory] = {}
    for model_file, together in by_file.items():
        owner = _owner(model_file, [models_of_group.get(stub.group, set()) for stub in together])
        if owner is not None:
            before = found.get(owner, ModelMemory(0, 0, 0, 0))
            gpu = [before.gpu_bytes, *(stub.gpu_bytes for stub in together)]
            found[owner] = ModelMemory(
                before.instances + len(together),
                before.private_bytes + sum(stub.private_bytes for stub in together),
                before.rss_bytes + sum(stub.rss_bytes for stub in together),
                None if None in gpu else sum(part for part in gpu if part is not None),
            )
    return found


def _owner(model_file: str, candidates: list[set[str]]) -> str | None:
    """The one model every stub of this file may belong to; its folder's name decides between several."""
    common = set.intersection(*candidates)
    if len(common) > 1:
        common &= {PurePosixPath(model_file).parent.parent.name}
    return next(iter(common)) if len(common) == 1 else None


def read_stubs(
    proc: Path = Path("/proc"), pids: Iterable[int] | None = None, gpu: Mapping[int, int | None] | None = None
) -> list[StubProcess]:
    """The python stubs among `pids` (every process in `proc` when None), with their resident and private
    memory, and their GPU memory from `gpu` (pid -> bytes, memory/nvml.py; None: unknown for all). A stub
    `gpu` does not list holds none, unless it has a GPU open: a listing that missed it knows nothing of
    it. A process that ends while read is left out, and so is one whose parent is not tritonserver: the
    pod's other containers share its process namespace, and any of them may name a process a stub."""
    found = []
    for pid in sorted(int(entry.name) for entry in proc.iterdir() if entry.name.isdigit()) if pids is None else pids:
        try:
            cmdline = tuple((proc / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1])
            if not is_stub(cmdline) or _parent_name(pid, proc) != TRITONSERVER:
                continue
            rollup = _kib_fields((proc / str(pid) / "smaps_rollup").read_text())
        except (FileNotFoundError, ProcessLookupError):
            continue
        private = (rollup.get("Private_Clean", 0) + rollup.get("Private_Dirty", 0)) * 1024
        found.append(StubProcess(pid, cmdline, rollup.get("Rss", 0) * 1024, private, _gpu_bytes(pid, gpu, proc)))
    return found


def _parent_name(pid: int, proc: Path) -> str:
    """The name of the process's parent. Its pid is the second field after the last ')' of its stat: the
    process's own name, in parentheses before it, may hold anything, ')' and digits too."""
    parent = (proc / str(pid) / "stat").read_text().rpartition(")")[2].split()[1]
    return (proc / parent / "comm").read_text().rstrip("\n")


def _gpu_bytes(pid: int, gpu: Mapping[int, int | None] | None, proc: Path) -> int | None:
    if gpu is None or pid in gpu:
        return None if gpu is None else gpu[pid]
    return None if holds_nvidia_device(pid, proc) else 0


def _kib_fields(text: str) -> dict[str, int]:
    return {name: int(kib) for name, kib in _KIB_LINE.findall(text)}
