"""Local mode shows its tritonserver exactly the GPUs the server's spec asks for, as a pod gets exactly
those it requests, and refuses a Python environment its python backend cannot run or would misread
tensors in (a stub that cannot start, numpy 2)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.support.local_mode import local_command
from tests.support.ports import free_ports
from triton_operator.api.server import TritonServerSpec
from triton_operator.local.tritonserver import (
    LocalTriton,
    Ports,
    TritonFailed,
    TritonInstall,
    find_tritonserver,
    host_gpus,
    visible_gpus,
)


@pytest.mark.parametrize(
    ("count", "host", "expected"),
    [
        (0, ["0", "1"], ""),
        (0, [], ""),
        (1, ["0", "1"], "0"),
        (2, ["3", "5", "6"], "3,5"),
        (2, ["GPU-a1", "GPU-b2"], "GPU-a1,GPU-b2"),
    ],
)
def test_a_server_gets_the_first_gpus_it_asks_for(count: int, host: list[str], expected: str) -> None:
    assert visible_gpus(count, host) == expected


@pytest.mark.parametrize(
    ("count", "host", "says"), [(1, [], "no GPUs"), (2, ["0"], "1 GPU to give"), (4, ["0", "1"], "2 GPUs")]
)
def test_a_server_asking_for_more_gpus_than_the_host_has_is_refused(count: int, host: list[str], says: str) -> None:
    with pytest.raises(
        TritonFailed, match=f"gpus.count is {count}, and this host has {says}.*lower the server's gpus.count"
    ):
        visible_gpus(count, host)


@pytest.mark.parametrize(
    ("value", "expected"), [("", []), ("-1", []), ("0,1", ["0", "1"]), ("2", ["2"]), ("GPU-1234", ["GPU-1234"])]
)
def test_cuda_visible_devices_decides_what_the_host_has_to_give(value: str, expected: list[str]) -> None:
    assert host_gpus({"CUDA_VISIBLE_DEVICES": value}) == expected


def _environ(pid: int) -> dict[str, str]:
    return dict(entry.split("=", 1) for entry in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in entry)


@pytest.mark.triton
def test_a_server_of_no_gpus_starts_a_tritonserver_that_sees_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # as if the host had a GPU to give
    with LocalTriton(
        TritonServerSpec.model_validate({"exitTimeoutSeconds": 5}), tmp_path, Ports(*free_ports(3))
    ) as triton:
        assert triton.process is not None
        assert _environ(triton.process.pid)["CUDA_VISIBLE_DEVICES"] == ""


def test_local_mode_refuses_a_server_asking_for_gpus_the_host_lacks(tmp_path: Path) -> None:
    server = tmp_path / "server.yaml"
    server.write_text(
        "apiVersion: triton-operator.io/v1alpha1\nkind: TritonServer\nmetadata: {name: gpu}\nspec: {gpus: {count: 1}}\n"
    )
    environ = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        local_command([server], tmp_path / "work", "--once"), env=environ, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "gpus.count is 1, and this host has no GPUs to give" in result.stderr + result.stdout, result.stderr


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{text}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize(
    ("numpy", "refusal"),
    [
        (
            "echo 2.1.0",
            r"would run with numpy 2.1.0 \(.*python3\), which this Triton's python backend reads wrong.*pip "
            r"install 'numpy<2'",
        ),
        ("echo none", r"the python backend needs numpy, and .*python3 has none: pip install 'numpy<2' there"),
    ],
)
def test_a_python_environment_the_stub_would_misread_tensors_in_is_refused(
    tmp_path: Path, numpy: str, refusal: str
) -> None:
    """The python3 first on PATH is the stub's: one that reports numpy 2 (or none) is refused."""
    _script(tmp_path / "bin" / "python3", numpy)
    env = {**find_tritonserver().environment(visible_gpus=""), "PATH": str(tmp_path / "bin")}
    with pytest.raises(TritonFailed, match=refusal):
        find_tritonserver().check_python_backend(env)


def test_the_running_pythons_environment_is_accepted() -> None:
    install = find_tritonserver()
    install.check_python_backend(install.environment(visible_gpus=""))


def test_a_stub_that_cannot_find_its_libpython_is_refused(tmp_path: Path) -> None:
    """As the stub of a Python built without a shared libpython fails (its model then loads for ever)."""
    version = os.path.basename(find_tritonserver().stub().parent)
    message = (
        "error while loading shared libraries: libpython3.99.so.1.0: cannot open shared object file: No such file "
        "or directory"
    )
    _script(
        tmp_path / "python_backend_stubs" / version / "triton_python_backend_stub", f"echo '{message}' >&2; exit 127"
    )
    install = TritonInstall(root=tmp_path, libraries=tmp_path)
    with pytest.raises(
        TritonFailed, match=r"stub for Python 3\.\d+ cannot start, libpython3.99.so.1.0 is not found: .*--enable-shared"
    ):
        install.check_python_backend(install.environment(visible_gpus=""))
