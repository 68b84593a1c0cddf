"""A process's GPU memory from NVML, used only where NVML's pids check out as the pod's (pure, and over a
stand-in for pynvml and a /proc of files), and a KIND_GPU python model measured on a real GPU."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import textwrap
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from tests.support.models import load, python_model
from tests.support.nvml_standin import NVML_ERROR_GPU_IS_LOST, NVML_ERROR_LIBRARY_NOT_FOUND, NvmlStandIn, ProcessInfo
from tests.support.ports import free_ports
from triton_operator.api.server import TritonServerSpec
from triton_operator.local.tritonserver import LocalTriton, Ports
from triton_operator.memory.attribution import model_memory, read_stubs
from triton_operator.memory.nvml import (
    GpuProcess,
    gpu_bytes_by_pid,
    holds_nvidia_device,
    list_gpu_processes,
    process_gpu_bytes,
)

MiB = 1 << 20


def test_the_stand_in_has_pynvmls_names_and_parameters() -> None:
    """pynvml loads its library only in nvmlInit, but may be absent: its source is read where it is installed."""
    spec = importlib.util.find_spec("pynvml")
    if spec is None or spec.origin is None:
        pytest.skip("pynvml (nvidia-ml-py) is not installed here")
    real = {
        node.name: [arg.arg for arg in node.args.args]
        for node in ast.parse(Path(spec.origin).read_text()).body
        if isinstance(node, ast.FunctionDef)
    }
    standin = NvmlStandIn([])
    for name in [
        "nvmlInit",
        "nvmlShutdown",
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetComputeRunningProcesses",
    ]:
        assert list(inspect.signature(getattr(standin, name)).parameters) == real[name], name
    classes = {
        node.name: node for node in ast.parse(Path(spec.origin).read_text()).body if isinstance(node, ast.ClassDef)
    }
    assert "NVMLError" in classes
    source = Path(spec.origin).read_text()
    assert f"NVML_ERROR_LIBRARY_NOT_FOUND         = {NVML_ERROR_LIBRARY_NOT_FOUND}" in source
    assert "obj.usedGpuMemory = None" in source  # NVML_VALUE_NOT_AVAILABLE becomes None, as the stand-in gives it


@pytest.mark.parametrize(
    ("listed", "ours", "expected"),
    [
        pytest.param([], set(), {}, id="no GPU process: every process holds none"),
        pytest.param(
            [GpuProcess(41, 700 * MiB), GpuProcess(42, 600 * MiB), GpuProcess(41, 100 * MiB)],
            {41, 42},
            {41: 800 * MiB, 42: 600 * MiB},
            id="translated pids: summed over the GPUs",
        ),
        pytest.param(
            [GpuProcess(41, 700 * MiB), GpuProcess(3456789, 776 * MiB)],
            {41},
            None,
            id="a pid not ours (a host pid): nothing",
        ),
        pytest.param([GpuProcess(41, 700 * MiB)], set(), None, id="a pid naming a process with no GPU open: nothing"),
        pytest.param(
            [GpuProcess(41, None), GpuProcess(41, 5), GpuProcess(42, 9)],
            {41, 42},
            {41: None, 42: 9},
            id="NVML cannot say for one GPU: unknown for that pid",
        ),
    ],
)
def test_nvmls_pids_are_used_only_where_they_are_ours(
    listed: list[GpuProcess], ours: set[int], expected: dict[int, int | None] | None
) -> None:
    assert gpu_bytes_by_pid(listed, lambda pid: pid in ours) == expected


def fake_proc(root: Path, fds: dict[int, list[str]]) -> Path:
    """A /proc whose processes have these files open (their fds' link targets)."""
    for pid, targets in fds.items():
        (root / str(pid) / "fd").mkdir(parents=True)
        for fd, target in enumerate(targets):
            os.symlink(target, root / str(pid) / "fd" / str(fd))
    return root


def test_a_process_holds_a_gpu_with_an_nvidia_device_open(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {7: ["/dev/null", "/dev/nvidiactl", "/dev/nvidia0"], 8: ["/dev/null", "socket:[123]"]})
    assert holds_nvidia_device(7, proc)
    assert not holds_nvidia_device(8, proc)
    assert not holds_nvidia_device(9, proc)  # gone


@pytest.mark.parametrize(
    ("nvml", "expected"),
    [
        pytest.param(NvmlStandIn([], failing={"nvmlInit": NVML_ERROR_LIBRARY_NOT_FOUND}), None, id="no NVML library"),
        pytest.param(NvmlStandIn([]), None, id="no GPU"),
        pytest.param(
            NvmlStandIn(
                [[ProcessInfo(7, 10)]], failing={"nvmlDeviceGetComputeRunningProcesses": NVML_ERROR_GPU_IS_LOST}
            ),
            None,
            id="an NVML error",
        ),
        pytest.param(
            NvmlStandIn([[ProcessInfo(7, 700 * MiB), ProcessInfo(8, None)], [], [ProcessInfo(7, 5)]]),
            [GpuProcess(7, 700 * MiB), GpuProcess(8, None), GpuProcess(7, 5)],
            id="three GPUs",
        ),
    ],
)
def test_nvml_lists_every_gpus_processes_or_says_nothing(nvml: NvmlStandIn, expected: list[GpuProcess] | None) -> None:
    assert list_gpu_processes(nvml) == expected
    assert nvml.initialized == 0  # shut down again


def stub_proc(root: Path, stubs: dict[int, tuple[str, str]], with_gpu_open: list[int]) -> Path:
    """A /proc of python stubs (pid -> model, instance) of tritonserver 5, 16.5 MiB private each, and these pids
    with a GPU open."""
    (root / "5").mkdir(parents=True)
    (root / "5" / "comm").write_text("tritonserver\n")
    for pid, (model, instance) in stubs.items():
        cmdline = [
            "/opt/python/triton_python_backend_stub",
            f"/models/{model}/1/model.py",
            "region",
            "1048576",
            "1048576",
            "5",
            "/opt/python",
            "336",
            instance,
            "DEFAULT",
        ]
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes("\0".join(cmdline).encode() + b"\0")
        (root / str(pid) / "stat").write_text(f"{pid} (triton_python_b) S 5 {pid} {pid} 0 -1 4194560\n")
        (root / str(pid) / "smaps_rollup").write_text(
            "Rss:               37000 kB\nPrivate_Clean:       100 kB\nPrivate_Dirty:     16796 kB\n"
        )
    return fake_proc(root, {pid: ["/dev/nvidiactl", "/dev/nvidia0"] for pid in with_gpu_open})


def test_a_pods_stubs_get_the_gpu_memory_nvml_lists_for_them(tmp_path: Path) -> None:
    stubs = {41: ("gpu", "gpu_0_0"), 42: ("gpu", "gpu_0_1"), 43: ("cpu", "cpu_0_0"), 44: ("missed", "missed_0_0")}
    proc = stub_proc(tmp_path, stubs, with_gpu_open=[5, 41, 42, 44])  # 5: tritonserver
    pb = grpcclient.model_config_pb2
    configs = {
        name: pb.ModelConfig(instance_group=[pb.ModelInstanceGroup(count=2 if name == "gpu" else 1)])
        for name in ("gpu", "cpu", "missed")
    }
    translated = NvmlStandIn([[ProcessInfo(5, 776 * MiB), ProcessInfo(41, 612 * MiB), ProcessInfo(42, 710 * MiB)]])
    stubs = read_stubs(proc, gpu=process_gpu_bytes(proc, translated))
    # 44 has a GPU open but is not listed (a listing of other GPUs than its own): unknown, not 0.
    assert [(stub.pid, stub.gpu_bytes) for stub in stubs] == [(41, 612 * MiB), (42, 710 * MiB), (43, 0), (44, None)]
    measured = model_memory(stubs, configs)
    assert (measured["gpu"].gpu_bytes, measured["cpu"].gpu_bytes, measured["missed"].gpu_bytes) == (1322 * MiB, 0, None)
    # The same GPUs under a driver that gives host pids, one of which names a stub here: nothing is known, not a
    # wrong figure.
    host_pids = NvmlStandIn(
        [[ProcessInfo(3456789, 776 * MiB), ProcessInfo(3456801, 612 * MiB), ProcessInfo(41, 710 * MiB)]]
    )
    assert process_gpu_bytes(proc, host_pids) is None
    assert {
        name: memory.gpu_bytes for name, memory in model_memory(read_stubs(proc, gpu=None), configs).items()
    } == dict.fromkeys(configs)


# -- On a GPU ---------------------------------------------------------------------------------------

HELD_MIB = 256
INSTANCES = 2
CONTEXT_MIB = 1024  # a CUDA context's own memory is some hundreds of MiB (612-710 MiB a stub with torch's on an H100)
ALLOCATING = textwrap.dedent(f"""\
    import cuda.bindings.runtime as cudart

    class TritonPythonModel:
        def initialize(self, args):
            (error,) = cudart.cudaSetDevice(int(args["model_instance_device_id"]))
            assert error == cudart.cudaError_t.cudaSuccess, error
            error, self.held = cudart.cudaMalloc({HELD_MIB} << 20)
            assert error == cudart.cudaError_t.cudaSuccess, error

        def execute(self, requests):
            return []

        def finalize(self):
            cudart.cudaFree(self.held)
    """).encode()
CONFIG = {
    "backend": "python",
    "maxBatchSize": 0,
    "instanceGroup": [{"kind": "KIND_GPU", "count": INSTANCES, "gpus": [0]}],
    "input": [{"name": "IN", "dataType": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUT", "dataType": "TYPE_FP32", "dims": [-1]}],
}


@pytest.mark.triton
@pytest.mark.gpu
def test_a_kind_gpu_model_is_measured_holding_what_it_allocated(tmp_path: Path) -> None:
    """The sidecar's reading, in this process's namespace (tritonserver and its stubs are ours): NVML's
    pids check out, and the model's stubs hold what they allocated plus their CUDA contexts."""
    spec = TritonServerSpec.model_validate({"exitTimeoutSeconds": 5, "gpus": {"count": 1}})
    with LocalTriton(spec, tmp_path, Ports(*free_ports(3))) as triton:
        assert triton.process is not None
        load(triton, python_model("holds_gpu", CONFIG, ALLOCATING))
        client = grpcclient.InferenceServerClient(triton.grpc_url)
        configs = {"holds_gpu": client.get_model_config("holds_gpu").config}
        client.close()
        gpu = process_gpu_bytes()
        assert gpu is not None, (
            "NVML's listing did not check out as this namespace's (pynvml missing, or another user's process on "
            "the GPU)"
        )
        stubs = [
            stub for stub in read_stubs(gpu=gpu) if stub.cmdline[5] == str(triton.process.pid)
        ]  # the stub's TRITON_PID
        measured = model_memory(stubs, configs)["holds_gpu"]
    print(f"GPU memory by pid: {gpu}; the model's stubs: {[(stub.pid, stub.gpu_bytes) for stub in stubs]}")
    assert measured.instances == INSTANCES and measured.gpu_bytes is not None
    assert INSTANCES * HELD_MIB * MiB <= measured.gpu_bytes < INSTANCES * (HELD_MIB + CONTEXT_MIB) * MiB
