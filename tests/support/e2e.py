"""The cluster the e2e tier runs against, and kubectl pointed at it.

By default the tier starts a control plane of its own, built from source (`make cluster-build`, which
needs Go): a real kube-apiserver, etcd, controller-manager and scheduler, and, as root, a node (the
process kubelet) and the Service proxy (tests/support/controlplane). Where those are not built it
skips, saying NOT RUN and why: a skip is not a pass.
TRITON_OPERATOR_E2E_CONTEXT=<context> runs it against a test cluster of yours instead (kind-* or
*test* only: it never touches another cluster by mistake).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.controlplane import ControlPlane, missing_binaries

USER_CONTEXT = os.environ.get("TRITON_OPERATOR_E2E_CONTEXT", "")
KUBECTL = shutil.which("kubectl") or str(ROOT / ".tools/bin/kubectl")


def not_run_reason() -> str | None:
    """Why the tier cannot run here, or None."""
    if USER_CONTEXT:
        return None
    if missing := missing_binaries():
        why = "no Go on this machine" if shutil.which("go") is None else "run `make cluster-build`"
        return f"NOT RUN: the control plane is not built ({', '.join(missing)} missing in .cluster/bin: {why})"
    return None


@dataclass(frozen=True)
class TestCluster:
    context: str
    kubeconfig: str | None  # None: kubectl's own (a user's test cluster)
    has_nodes: bool  # pods run: a node of ours (as root), or a user's cluster
    plane: ControlPlane | None = None  # ours (None on a user's cluster): its logs, and its API server to stop

    @property
    def audit_log(self) -> Path | None:
        """Our control plane's: the status writes to our kinds, as asked and as stored."""
        return self.plane.audit_log if self.plane else None


_current: list[TestCluster] = []


def use(cluster: TestCluster | None) -> None:
    """The cluster `kubectl` talks to from now on (set by the e2e tier's session fixture)."""
    _current[:] = [cluster] if cluster else []


def current() -> TestCluster:
    if not _current:
        pytest.fail("no e2e cluster: the e2e tier's fixture did not run")
    return _current[0]


# The marks of every e2e module; tests/e2e/conftest.py starts (or finds) the cluster.
E2E_MARKS = [pytest.mark.e2e, pytest.mark.usefixtures("e2e_cluster")]
# A test that needs pods to run (a node with a container runtime).
NEEDS_NODES = pytest.mark.usefixtures("e2e_nodes")


def kubectl(
    *args: str, check: bool = True, input: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    cluster = current()
    if not (cluster.context.startswith("kind-") or "test" in cluster.context):
        pytest.fail(f"refusing context {cluster.context!r}: e2e runs only against a test cluster (kind-* or *test*)")
    env = {**os.environ, **({"KUBECONFIG": cluster.kubeconfig} if cluster.kubeconfig else {})}
    result = subprocess.run(
        [KUBECTL, "--context", cluster.context, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        input=input,
    )
    if check and result.returncode != 0:
        pytest.fail(f"kubectl {' '.join(args)} exited {result.returncode}:\n{result.stderr[-4000:]}")
    return result


def environment() -> dict[str, str]:
    """A shell's environment for the current cluster: its kubeconfig, and helm and kubectl on PATH."""
    cluster = current()
    return {
        **os.environ,
        "PATH": f"{ROOT / '.tools/bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        **({"KUBECONFIG": cluster.kubeconfig} if cluster.kubeconfig else {}),
    }


def readme_commands(first_word: str) -> str:
    """The README's shell block whose first command starts with `first_word`, as a user copies it."""
    text = (ROOT / "README.md").read_text()
    for block in text.split("```sh\n")[1:]:
        commands = block.split("```", 1)[0]
        if commands.lstrip().startswith(first_word):
            return commands
    raise AssertionError(f"README has no ```sh block starting with {first_word!r}")
