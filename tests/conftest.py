from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from triton_operator.api.resources import read_documents

if TYPE_CHECKING:
    from tests.support.operator import Pods

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def example_documents() -> list[dict[str, Any]]:
    return [document for path in sorted(EXAMPLES.glob("*.yaml")) for document in read_documents(path.read_text())]


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
