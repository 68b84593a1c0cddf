from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from triton_operator.api.resources import read_documents
from triton_operator.local.tritonserver import host_gpus

if TYPE_CHECKING:
    from tests.support.operator import Pods

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def example_documents() -> list[dict[str, Any]]:
    return [document for path in sorted(EXAMPLES.glob("*.yaml")) for document in read_documents(path.read_text())]


def _why_no_gpu() -> str | None:
    """Why the `gpu` tests cannot run here, or None: they need a GPU and tritonclient's CUDA utilities."""
    if not host_gpus(os.environ):
        return "no GPU here (CUDA_VISIBLE_DEVICES or the NVIDIA driver): run `make gpu-check` on a GPU host"
    try:
        import tritonclient.utils.cuda_shared_memory  # noqa: F401
    except Exception as error:  # cuda-python missing or broken
        return f"tritonclient's CUDA utilities do not load: {error}"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A `gpu` test skips, saying why, where there is no GPU: a skip is never a pass."""
    if item.get_closest_marker("gpu") and (why := _why_no_gpu()):
        pytest.skip(why)


@pytest.fixture
def examples() -> list[dict[str, Any]]:
    return example_documents()


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[Pods]:
    """Real tritonservers standing in for a server's pods; stopped at the end, leaving no /dev/shm region."""
    from tests.support.operator import Pods  # kopf and kmock, only for the tests that use pods

    pods = Pods(tmp_path)
    yield pods
    assert pods.stop_all() == []
