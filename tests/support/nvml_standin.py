"""A stand-in for pynvml (nvidia-ml-py) where no GPU is: the functions memory/nvml.py calls, with pynvml's
names and parameters (tests/memory/test_gpu_memory.py checks them against pynvml's source where it is installed),
over GPUs given as lists of (pid, usedGpuMemory)."""

from __future__ import annotations

from dataclasses import dataclass

NVML_ERROR_LIBRARY_NOT_FOUND = 12  # pynvml's values
NVML_ERROR_GPU_IS_LOST = 15


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


@dataclass(frozen=True)
class ProcessInfo:
    """pynvml's friendly object of c_nvmlProcessInfo_v3_t: usedGpuMemory None where NVML cannot say."""

    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


class NvmlStandIn:
    """The module: `gpus` lists each GPU's compute processes; `failing` makes a call raise NVMLError with that
    value (nvmlInit with NVML_ERROR_LIBRARY_NOT_FOUND: no driver library here). `initialized` counts
    nvmlInit calls not yet shut down."""

    NVMLError = NVMLError

    def __init__(self, gpus: list[list[ProcessInfo]], failing: dict[str, int] | None = None) -> None:
        self.gpus = gpus
        self.failing = failing or {}
        self.initialized = 0

    def _call(self, name: str) -> None:
        if name in self.failing:
            raise NVMLError(self.failing[name])
        if name != "nvmlInit" and self.initialized <= 0:
            raise AssertionError(f"{name} before nvmlInit")

    def nvmlInit(self) -> None:
        self._call("nvmlInit")
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")
        self.initialized -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._call("nvmlDeviceGetHandleByIndex")
        assert 0 <= index < len(self.gpus)
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[ProcessInfo]:
        self._call("nvmlDeviceGetComputeRunningProcesses")
        return list(self.gpus[handle])
