from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from triton_operator.api.resources import read_documents

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def example_documents() -> list[dict[str, Any]]:
    return [document for path in sorted(EXAMPLES.glob("*.yaml")) for document in read_documents(path.read_text())]


@pytest.fixture
def examples() -> list[dict[str, Any]]:
    return example_documents()
