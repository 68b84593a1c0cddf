"""The test cluster the e2e tier runs against, and kubectl pointed at it."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

CONTEXT = os.environ.get("TRITON_OPERATOR_E2E_CONTEXT", "")
KUBECTL = shutil.which("kubectl") or str(ROOT / ".tools/bin/kubectl")

# The marks of every e2e module: without a configured test cluster it skips, and says why.
E2E_MARKS = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not CONTEXT, reason="no test cluster configured: set TRITON_OPERATOR_E2E_CONTEXT (e.g. kind-triton)"
    ),
]


def kubectl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if not (CONTEXT.startswith("kind-") or "test" in CONTEXT):
        pytest.fail(f"refusing context {CONTEXT!r}: e2e runs only against a test cluster (kind-* or *test*)")
    return subprocess.run(
        [KUBECTL, "--context", CONTEXT, *args], capture_output=True, text=True, check=check, timeout=120
    )
