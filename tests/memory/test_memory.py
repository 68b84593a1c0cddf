"""A model's host memory from its python stubs' /proc: attributed by their command lines (pure, with the
command lines the wheel's tritonserver 2.51 gave its stubs), and measured on a real tritonserver."""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from tests.support import models
from triton_operator.api.resources import TritonModel
from triton_operator.api.status_fields import MemoryStatus
from triton_operator.decide.status_content import memory_figure
from triton_operator.k8s.server.sidecar_reads import (
    PodReading,
    measured_figures,
    pod_figures,
    reported_gpu,
    wait_before_reading,
)
from triton_operator.memory.attribution import (
    MeasuredMemory,
    ModelMemory,
    StubProcess,
    instance_group_names,
    is_stub,
    model_memory,
    read_stubs,
)
from triton_operator.protocol.triton_proto import model_config_pb2 as pb
from triton_operator.triton.batching import ModelStatistics

MiB = 1 << 20
BACKEND = "/tmp/tmp2fwq2rjy/backends/python"


def stub(pid: int, model_file: str, instance: str, private_mib: float = 16.5) -> StubProcess:
    """A stub with the command line tritonserver gave it (read from /proc/<pid>/cmdline)."""
    region = f"triton_operator_12750_610a399d_{pid:08x}-125b-4d22-b373-de97d53b6ae6"
    cmdline = (f"{BACKEND}/triton_python_backend_stub", model_file, region,
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
            [
                stub(1, "/tmp/folderA/1/model.py", "small_0_0", 16.5),
                stub(2, "/tmp/folderB/1/model.py", "big_0_0", 272.5),
            ],
            {"small": config(("", 1)), "big": config(("", 1))},
            {"small": (1, 16.5), "big": (1, 272.5)},
            id="one stub each, loaded with their files",
        ),
        pytest.param(
            [
                stub(1, "/tmp/folderE/1/model.py", "fast_0"),
                stub(2, "/tmp/folderE/1/model.py", "fast_1"),
                stub(3, "/tmp/folderE/1/model.py", "named_1_0"),
            ],
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
def test_stubs_are_attributed_to_their_models(
    stubs: list[StubProcess], configs: dict[str, pb.ModelConfig], expected: dict[str, tuple[int, float]]
) -> None:
    found = model_memory(stubs, configs)
    assert {name: (memory.instances, memory.private_bytes / MiB) for name, memory in found.items()} == expected


HOLDING = (
    "import numpy as np\n\nclass TritonPythonModel:\n"
    "    def initialize(self, args):\n        self.held = np.ones({mib} << 20, np.uint8)\n\n"
    "    def execute(self, requests):\n        return []\n"
)
STUB_BASELINE_MIB = 16.5  # a stub's private memory when model.py holds nothing (bench/RESULTS.md)


@pytest.mark.triton
def test_models_measure_what_they_hold_plus_the_stubs_baseline(tmp_path: Path) -> None:
    held = {"hold64": 64, "hold128": 128, "hold256": 256, "hold0": 0}
    config = {
        "backend": "python",
        "maxBatchSize": 0,
        "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
        "input": [{"name": "IN", "dataType": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUT", "dataType": "TYPE_FP32", "dims": [-1]}],
    }
    with models.pod_triton(tmp_path) as triton:
        models.load(
            triton,
            *(
                models.python_model(name, config, textwrap.dedent(HOLDING.format(mib=mib)).encode())
                for name, mib in held.items()
            ),
        )
        client = grpcclient.InferenceServerClient(triton.grpc_url)
        configs = {name: client.get_model_config(name).config for name in held}
        client.close()
        ours = [s for s in read_stubs() if s.cmdline[5] == str(triton.process.pid)]  # the stub's TRITON_PID
        measured = model_memory(ours, configs)
    for name, mib in held.items():
        assert measured[name].instances == 1
        assert measured[name].private_bytes == pytest.approx((mib + STUB_BASELINE_MIB) * MiB, rel=0.10), name


# -- The operator's reading of a pod's sidecar (k8s/server/sidecar_reads.py) -----------------------------

SERVED = frozenset({("holds", "r1")})


@pytest.mark.parametrize(
    ("last", "served", "now", "expected"),
    [
        pytest.param(None, frozenset(), 100.0, None, id="nothing served: no reading"),
        pytest.param(None, SERVED, 100.0, 0.0, id="never read: now"),
        pytest.param(PodReading(90.0, "t", SERVED, {}), SERVED, 100.0, None, id="nothing changed: none"),
        pytest.param(
            PodReading(90.0, "t", frozenset(), {}), SERVED, 100.0, 0.0, id="a load since, the interval past: now"
        ),
        pytest.param(
            PodReading(95.0, "t", frozenset(), {}),
            SERVED,
            100.0,
            5.0,
            id="a load since, within the interval: when it ends",
        ),
        pytest.param(
            PodReading(90.0, "t", frozenset({("holds", "r0")}), {}), SERVED, 100.0, 0.0, id="a reload since: now"
        ),
    ],
)
def test_a_pod_is_read_after_what_it_serves_changed_at_most_once_an_interval(
    last: PodReading | None, served: frozenset[tuple[str, str]], now: float, expected: float | None
) -> None:
    assert wait_before_reading(last, served, now, interval=10.0) == expected


AT1, AT2 = "2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z"


def test_a_models_measured_figure_is_its_largest_pods_part_by_part() -> None:
    pods = [
        pod_figures(
            PodReading(
                1.0,
                AT1,
                SERVED,
                {"holds": ModelMemory(2, 161 * MiB, 200 * MiB, 900 * MiB), "small": ModelMemory(1, 17 * MiB, 36 * MiB)},
            ),
            {},
        ),
        pod_figures(PodReading(2.0, AT2, SERVED, {"holds": ModelMemory(2, 170 * MiB, 210 * MiB, 800 * MiB)}), {}),
    ]
    assert measured_figures(pods) == {
        "holds": MeasuredMemory(cpu=(170 * MiB, AT2), gpu=(900 * MiB, AT1)),
        "small": MeasuredMemory(cpu=(17 * MiB, AT1)),
    }
    assert measured_figures(pods)["holds"].measured_at == AT2


@pytest.mark.parametrize(
    ("models", "reported", "expected"),
    [
        pytest.param(
            {"m": ModelMemory(1, 17 * MiB, 36 * MiB)},
            {},
            MeasuredMemory(cpu=(17 * MiB, AT2)),
            id="stubs, no GPU seen: host only",
        ),
        pytest.param(
            {"m": ModelMemory(1, 17 * MiB, 36 * MiB, 0)},
            {},
            MeasuredMemory(cpu=(17 * MiB, AT2), gpu=(0, AT2)),
            id="stubs seen holding no GPU",
        ),
        pytest.param(
            {},
            {"m": (300 * MiB, AT1)},
            MeasuredMemory(gpu=(300 * MiB, AT1)),
            id="the backend's report alone (no stubs): GPU only",
        ),
        pytest.param(
            {"m": ModelMemory(1, 17 * MiB, 36 * MiB, 700 * MiB)},
            {"m": (300 * MiB, AT1)},
            MeasuredMemory(cpu=(17 * MiB, AT2), gpu=(300 * MiB, AT1)),
            id="the backend's report wins over the stubs'",
        ),
    ],
)
def test_a_pods_figure_for_a_model(
    models: dict[str, ModelMemory], reported: dict[str, tuple[int, str]], expected: MeasuredMemory
) -> None:
    assert pod_figures(PodReading(2.0, AT2, SERVED, models), reported) == {"m": expected}


def test_the_gpu_memory_a_backend_reports_is_taken_for_the_models_a_pod_serves() -> None:
    statistics = {
        "onnx": ModelStatistics(gpu_memory_bytes=300 * MiB),
        "python": ModelStatistics(),
        "old": ModelStatistics(gpu_memory_bytes=5),
    }
    served = frozenset({("onnx", "r1"), ("python", "r1")})
    assert reported_gpu({}, statistics, served, AT1) == {"onnx": (300 * MiB, AT1)}
    assert reported_gpu({"onnx": (300 * MiB, AT1)}, statistics, served, AT2) == {
        "onnx": (300 * MiB, AT1)
    }  # unchanged: its time kept
    grown = {"onnx": ModelStatistics(gpu_memory_bytes=400 * MiB)}
    assert reported_gpu({"onnx": (300 * MiB, AT1)}, grown, served, AT2) == {"onnx": (400 * MiB, AT2)}


def model_declaring(memory: dict[str, str] | None) -> TritonModel:
    spec = {"serverRef": {"name": "s"}, "config": {"backend": "python"}} | ({"memory": memory} if memory else {})
    return TritonModel.model_validate(
        {"apiVersion": "triton-operator.io/v1alpha1", "kind": "TritonModel", "metadata": {"name": "m"}, "spec": spec}
    )


@pytest.mark.parametrize(
    ("declared", "measured", "expected"),
    [
        pytest.param(
            {"cpu": "80Mi", "gpu": "1Gi"},
            None,
            MemoryStatus(cpu_bytes=80 * MiB, gpu_bytes=1 << 30, source="Declared"),
            id="nothing measured",
        ),
        pytest.param(
            None,
            MeasuredMemory(),
            MemoryStatus(cpu_bytes=20 * MiB, source="Default"),
            id="nothing measured, nothing declared",
        ),
        pytest.param(
            {"cpu": "80Mi", "gpu": "1Gi"},
            MeasuredMemory(cpu=(161 * MiB, AT2)),
            MemoryStatus(cpu_bytes=161 * MiB, gpu_bytes=1 << 30, source="Measured", measured_at=AT2),
            id="host measured, GPU declared: Measured, the GPU figure the declared one",
        ),
        pytest.param(
            {"cpu": "80Mi", "gpu": "1Gi"},
            MeasuredMemory(gpu=(300 * MiB, AT1)),
            MemoryStatus(cpu_bytes=80 * MiB, gpu_bytes=300 * MiB, source="Measured", measured_at=AT1),
            id="GPU measured (a backend's report), host declared",
        ),
        pytest.param(
            {"gpu": "1Gi"},
            MeasuredMemory(cpu=(161 * MiB, AT2), gpu=(1322 * MiB, AT1)),
            MemoryStatus(cpu_bytes=161 * MiB, gpu_bytes=1322 * MiB, source="Measured", measured_at=AT2),
            id="both measured: the later time",
        ),
    ],
)
def test_a_measured_part_replaces_the_declared_one(
    declared: dict[str, str] | None, measured: MeasuredMemory | None, expected: MemoryStatus
) -> None:
    assert memory_figure(model_declaring(declared), measured) == expected


def test_a_refused_spec_has_no_figure() -> None:
    assert memory_figure(None, MeasuredMemory(cpu=(161 * MiB, AT2))) is None


@pytest.mark.parametrize(
    ("stub_gpu", "expected"),
    [
        pytest.param([700 * MiB, 612 * MiB], 1312 * MiB, id="summed"),
        pytest.param([700 * MiB, None], None, id="one unknown: unknown"),
        pytest.param([None, None], None, id="no GPU seen"),
    ],
)
def test_a_models_gpu_memory_is_its_stubs(stub_gpu: list[int | None], expected: int | None) -> None:
    stubs = [
        replace(stub(pid, "/tmp/folderA/1/model.py", f"m_0_{pid}"), gpu_bytes=gpu) for pid, gpu in enumerate(stub_gpu)
    ]
    assert model_memory(stubs, {"m": config(("", 2))})["m"].gpu_bytes == expected


def test_the_sidecars_table_carries_gpu_bytes_only_where_known() -> None:
    seen = replace(stub(7, "/tmp/folderA/1/model.py", "m_0_0"), gpu_bytes=700 * MiB)
    unseen = stub(8, "/tmp/folderA/1/model.py", "m_0_1")
    assert seen.to_json()["gpuBytes"] == 700 * MiB and "gpuBytes" not in unseen.to_json()
    assert [StubProcess.from_json(json.loads(json.dumps(s.to_json()))) for s in (seen, unseen)] == [seen, unseen]


def fake_proc(root: Path, processes: dict[int, tuple[int, str, list[str]]]) -> Path:
    """A /proc of these processes: pid -> (parent pid, name, command line), 16.5 MiB private each."""
    for pid, (parent, name, cmdline) in processes.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "comm").write_text(f"{name}\n")
        (root / str(pid) / "stat").write_text(f"{pid} ({name}) S {parent} {pid} {pid} 0 -1 4194560 2330 0 0 0\n")
        (root / str(pid) / "cmdline").write_bytes("\0".join(cmdline).encode() + b"\0")
        (root / str(pid) / "smaps_rollup").write_text(
            "Rss:               37000 kB\nPrivate_Clean:       100 kB\nPrivate_Dirty:     16796 kB\n"
        )
    return root


def test_a_stub_counts_only_as_tritonservers_child(tmp_path: Path) -> None:
    """Every container of the pod shares its process namespace with the sidecar: a process of another one
    naming itself a stub (under a parent that calls itself what it likes) is counted for no model."""
    cmdline = list(stub(0, "/models/m/1/model.py", "m_0_0").cmdline)
    proc = fake_proc(
        tmp_path,
        {
            1: (0, "pause", ["/pause"]),
            5: (1, "tritonserver", ["tritonserver", "--model-repository=/models"]),
            41: (5, "triton_python_b", cmdline),
            60: (1, "sh", ["sh", "-c", "..."]),
            61: (60, "triton_python_b", cmdline),  # a sidecar's own "stub"
            62: (1, "triton_python_b", cmdline),  # reparented: its tritonserver is gone
            63: (99, "triton_python_b", cmdline),  # its parent gone meanwhile
            64: (60, "a) S 5 5 5", cmdline),  # a name that reads as tritonserver's child to a naive parse of stat
        },
    )
    assert [found.pid for found in read_stubs(proc)] == [41]
