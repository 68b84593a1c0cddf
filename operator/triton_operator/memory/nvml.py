"""What each process of the pod holds on the GPUs, from NVML, for the memory sidecar (memory/sidecar.py).

NVML, the driver's management library (the `pynvml` module of nvidia-ml-py), lists each GPU's compute
processes with the device memory each holds (`nvmlDeviceGetComputeRunningProcesses`: pid and
usedGpuMemory, its CUDA context included). The figure is right; its pid may not be ours:

- Older drivers give host pids whatever the caller's PID namespace: inside a pod such a pid names
  another process of the pod, or none (NVIDIA's own answer: "the driver does not support pid
  namespaces"; the fix was `--pid=host`).
- Newer ones translate: the open kernel modules' resource manager converts each client's pid into the
  caller's namespace and leaves out the processes that have none there.

/proc/<pid>/status NSpid cannot bridge the two: inside a container its first pid is the container
namespace's, not the host's. So a listing is used only where it checks out as ours: every pid it lists
is a process in our /proc that holds an NVIDIA device file open, as a process with a CUDA context
does (translated pids pass; host pids name no such process of the pod). A listing that fails the
check, NVML absent (no library, no driver, no GPU given to the sidecar) or failing, says nothing:
None, and the stubs' GPU memory stays unknown, never a figure for the wrong process. A process that
a listing which passed does not name holds no GPU memory, unless it has a GPU open itself
(memory.read_stubs): then the listing missed it, and it is unknown.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NVIDIA_DEVICE_PREFIX = "/dev/nvidia"  # /dev/nvidiactl, /dev/nvidia0, /dev/nvidia-uvm...


@dataclass(frozen=True)
class GpuProcess:
    """One compute process on one GPU, as NVML lists it."""

    pid: int
    used_bytes: int | None  # None: NVML cannot say (pynvml's NVML_VALUE_NOT_AVAILABLE)


def list_gpu_processes(nvml: Any = None) -> list[GpuProcess] | None:
    """Every GPU's compute processes; None where NVML cannot be asked (not installed, no driver, no GPU,
    an error). `nvml`: pynvml, or a stand-in."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return None
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(index) for index in range(nvml.nvmlDeviceGetCount())]
        listed = [
            GpuProcess(process.pid, process.usedGpuMemory)
            for handle in handles
            for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        ]
        return listed if handles else None
    except nvml.NVMLError:
        return None
    finally:
        nvml.nvmlShutdown()


def gpu_bytes_by_pid(listed: Iterable[GpuProcess], holds_gpu: Callable[[int], bool]) -> dict[int, int | None] | None:
    """Each listed pid's GPU memory summed over the GPUs (None where NVML could not say for one of them),
    where every listed pid `holds_gpu` here; else None: the listing's pids are not this namespace's."""
    found: dict[int, int | None] = {}
    for process in listed:
        before = found.get(process.pid, 0)
        found[process.pid] = None if before is None or process.used_bytes is None else before + process.used_bytes
    return found if all(holds_gpu(pid) for pid in found) else None


def holds_nvidia_device(pid: int, proc: Path = Path("/proc")) -> bool:
    """The process has an NVIDIA device file open; False where it is gone or its fds may not be read."""
    try:
        fds = list((proc / str(pid) / "fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd).startswith(NVIDIA_DEVICE_PREFIX):
                return True
        except OSError:  # closed meanwhile
            continue
    return False


def process_gpu_bytes(proc: Path = Path("/proc"), nvml: Any = None) -> dict[int, int | None] | None:
    """The GPU memory of this namespace's GPU processes by pid, or None where that cannot be known."""
    listed = list_gpu_processes(nvml)
    return None if listed is None else gpu_bytes_by_pid(listed, lambda pid: holds_nvidia_device(pid, proc))
