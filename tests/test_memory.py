"""A model's host memory from its python stubs' /proc: attributed by their command lines (pure, with the
command lines the wheel's tritonserver 2.51 gave its stubs), and measured on a real tritonserver."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from tests.support import models
from triton_operator.api.resources import TritonModel
from triton_operator.api.status import MemoryStatus
from triton_operator.k8s.memory_readings import PodReading, measured_figures, wait_before_reading
from triton_operator.k8s.status import memory_figure
from triton_operator.memory import ModelMemory, StubProcess, instance_group_names, is_stub, model_memory, read_stubs
from triton_operator.protocol.model_config import model_config_pb2 as pb

MiB = 1 << 20
BACKEND = "/tmp/tmp2fwq2rjy/backends/python"


def stub(pid: int, model_file: str, instance: str, private_mib: float = 16.5) -> StubProcess:
    """A stub with the command line tritonserver gave it (read from /proc/<pid>/cmdline)."""
    cmdline = (f"{BACKEND}/triton_python_backend_stub", model_file, f"triton_operator_12750_610a399d_{pid:08x}-125b-4d22-b373-de97d53b6ae6",
               "1048576", "1048576", "12774", BACKEND, "336", instance, "DEFAULT")  # fmt: skip
    return StubProcess(pid, cmdline, int((private_mib + 19.5) * MiB), int(private_mib * MiB))


def config(*groups: tuple[str, int]) -> pb.ModelConfig:
    """A config with these instance groups (name, count); an empty name is Triton's to give."""
    return pb.ModelConfig(instance_group=[pb.ModelInstanceGroup(name=name, count=count) for name, count in groups])


def test_the_group_names_triton_gives() -> None:
    # As read back from Triton after the loads: no group -> the model's name; unnamed -> <model>_<index>.
    assert instance_group_names("nogroup", config()) == ["nogroup"]
    assert instance_group_names("named", config(("fast", 2), ("", 1))) == ["fast", "named_1"]


def test_a_stub_is_known_by_its_program_and_its_arguments() -> None:
    assert is_stub(stub(1, "/tmp/folderFvissm/1/model.py", "a_0").cmdline)
    assert not is_stub(["/opt/tritonserver/bin/tritonserver", "--model-repository=/models"])
    assert not is_stub([f"{BACKEND}/triton_python_backend_stub", "/tmp/folderFvissm/1/model.py"])  # cut short


@pytest.mark.parametrize(
    ("stubs", "configs", "expected"),
    [
        pytest.param(
            [stub(1, "/tmp/folderA/1/model.py", "small_0_0", 16.5), stub(2, "/tmp/folderB/1/model.py", "big_0_0", 272.5)],
            {"small": config(("", 1)), "big": config(("", 1))},
            {"small": (1, 16.5), "big": (1, 272.5)},
            id="one stub each, loaded with their files",
        ),
        pytest.param(
            [stub(1, "/tmp/folderE/1/model.py", "fast_0"), stub(2, "/tmp/folderE/1/model.py", "fast_1"), stub(3, "/tmp/folderE/1/model.py", "named_1_0")],
            {"named": config(("fast", 2), ("", 1))},
            {"named": (3, 49.5)},
            id="every instance of every group summed",
        ),
        pytest.param(
            [stub(1, "/tmp/folderF/1/model.py", "nogroup_0")],
            {"nogroup": config()},
            {"nogroup": (1, 16.5)},
            id="a config without groups",
        ),
        pytest.param(
            [stub(1, "/models/first/1/model.py", "fast_0", 20), stub(2, "/models/second/1/model.py", "fast_0", 30)],
            {"first": config(("fast", 1)), "second": config(("fast", 1))},
            {"first": (1, 20), "second": (1, 30)},
            id="a group name two models share: the repository folder decides",
        ),
        pytest.param(
            [stub(1, "/tmp/folderG/1/model.py", "fast_0", 20), stub(2, "/tmp/folderH/1/model.py", "fast_0", 30)],
            {"first": config(("fast", 1)), "second": config(("fast", 1))},
            {},
            id="a group name two models share, loaded with their files: counted for neither",
        ),
        pytest.param(
            [stub(1, "/tmp/folderJ/1/model.py", "gone_0_0"), stub(2, "/tmp/folderK/1/model.py", "kept_0_0")],
            {"kept": config(("", 1))},
            {"kept": (1, 16.5)},
            id="a stub of a model not loaded counts for none",
        ),
    ],
)
def test_stubs_are_attributed_to_their_models(stubs: list[StubProcess], configs: dict[str, pb.ModelConfig], expected: dict[str, tuple[int, float]]) -> None:
    found = model_memory(stubs, configs)
    assert {name: (memory.instances, memory.private_bytes / MiB) for name, memory in found.items()} == expected


HOLDING = "import numpy as np\n\nclass TritonPythonModel:\n    def initialize(self, args):\n        self.held = np.ones({mib} << 20, np.uint8)\n\n    def execute(self, requests):\n        return []\n"
STUB_BASELINE_MIB = 16.5  # a stub's private memory when model.py holds nothing (bench/RESULTS.md)


@pytest.mark.triton
def test_models_measure_what_they_hold_plus_the_stubs_baseline(tmp_path: Path) -> None:
    held = {"hold64": 64, "hold128": 128, "hold256": 256, "hold0": 0}
    config = {"backend": "python", "maxBatchSize": 0, "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
              "input": [{"name": "IN", "dataType": "TYPE_FP32", "dims": [-1]}], "output": [{"name": "OUT", "dataType": "TYPE_FP32", "dims": [-1]}]}  # fmt: skip
    with models.pod_triton(tmp_path) as triton:
        models.load(triton, *(models.python_model(name, config, textwrap.dedent(HOLDING.format(mib=mib)).encode()) for name, mib in held.items()))
        client = grpcclient.InferenceServerClient(triton.grpc_url)
        configs = {name: client.get_model_config(name).config for name in held}
        client.close()
        ours = [s for s in read_stubs() if s.cmdline[5] == str(triton.process.pid)]  # the stub's TRITON_PID
        measured = model_memory(ours, configs)
    for name, mib in held.items():
        assert measured[name].instances == 1
        assert measured[name].private_bytes == pytest.approx((mib + STUB_BASELINE_MIB) * MiB, rel=0.10), name


# -- The operator's reading of a pod's sidecar (k8s/memory_readings.py) -----------------------------

SERVED = frozenset({("holds", "r1")})


@pytest.mark.parametrize(
    ("last", "served", "now", "expected"),
    [
        pytest.param(None, frozenset(), 100.0, None, id="nothing served: no reading"),
        pytest.param(None, SERVED, 100.0, 0.0, id="never read: now"),
        pytest.param(PodReading(90.0, "t", SERVED, {}), SERVED, 100.0, None, id="nothing changed: none"),
        pytest.param(PodReading(90.0, "t", frozenset(), {}), SERVED, 100.0, 0.0, id="a load since, the interval past: now"),
        pytest.param(PodReading(95.0, "t", frozenset(), {}), SERVED, 100.0, 5.0, id="a load since, within the interval: when it ends"),
        pytest.param(PodReading(90.0, "t", frozenset({("holds", "r0")}), {}), SERVED, 100.0, 0.0, id="a reload since: now"),
    ],
)
def test_a_pod_is_read_after_what_it_serves_changed_at_most_once_an_interval(last: PodReading | None, served: frozenset[tuple[str, str]], now: float, expected: float | None) -> None:
    assert wait_before_reading(last, served, now, interval=10.0) == expected


def test_a_models_measured_figure_is_its_largest_pods() -> None:
    readings = [
        PodReading(1.0, "2026-01-01T00:00:01Z", SERVED, {"holds": ModelMemory(2, 161 * MiB, 200 * MiB), "small": ModelMemory(1, 17 * MiB, 36 * MiB)}),
        PodReading(2.0, "2026-01-01T00:00:02Z", SERVED, {"holds": ModelMemory(2, 170 * MiB, 210 * MiB)}),
    ]
    assert measured_figures(readings) == {
        "holds": MemoryStatus(cpu_bytes=170 * MiB, source="Measured", measured_at="2026-01-01T00:00:02Z"),
        "small": MemoryStatus(cpu_bytes=17 * MiB, source="Measured", measured_at="2026-01-01T00:00:01Z"),
    }


def test_a_measured_figure_replaces_the_declared_host_memory_and_keeps_its_gpu() -> None:
    model = TritonModel.model_validate({"apiVersion": "triton-operator.io/v1alpha1", "kind": "TritonModel", "metadata": {"name": "m"}, "spec": {"serverRef": {"name": "s"}, "config": {"backend": "python"}, "memory": {"cpu": "80Mi", "gpu": "1Gi"}}})
    measured = MemoryStatus(cpu_bytes=161 * MiB, source="Measured", measured_at="2026-01-01T00:00:02Z")
    assert memory_figure(model, measured) == MemoryStatus(cpu_bytes=161 * MiB, gpu_bytes=1 << 30, source="Measured", measured_at="2026-01-01T00:00:02Z")
    assert memory_figure(model, None) == MemoryStatus(cpu_bytes=80 * MiB, gpu_bytes=1 << 30, source="Declared")
    assert memory_figure(None, measured) is None  # a refused spec
