"""The e2e tier's cluster: a control plane of its own for the session, or the user's test cluster."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.conftest import ROOT
from tests.support.controlplane import control_plane
from tests.support.controlplane.network import can_make_networks
from tests.support.e2e import (
    USER_CONTEXT,
    TestCluster,
    current,
    environment,
    kubectl,
    not_run_reason,
    readme_commands,
    use,
)


@pytest.fixture(scope="session")
def e2e_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    if reason := not_run_reason():
        pytest.skip(reason)
    if USER_CONTEXT:
        cluster = TestCluster(USER_CONTEXT, None, has_nodes=True)
        use(cluster)
        yield cluster
        return
    nodes = 1 if can_make_networks() else 0
    with control_plane(tmp_path_factory.mktemp("control-plane"), nodes=nodes) as plane:
        cluster = TestCluster("triton-test", str(plane.kubeconfig), has_nodes=bool(nodes), plane=plane)
        use(cluster)
        try:
            yield cluster
        finally:
            use(None)


@pytest.fixture(scope="session")  # session: it skips before a module's fixtures start anything
def e2e_nodes(e2e_cluster: TestCluster) -> None:
    if not current().has_nodes:
        pytest.skip("NOT RUN: needs a node, which runs pods in network namespaces: root and `ip` are needed")


@pytest.fixture(scope="session")
def operator_installed(e2e_nodes: None) -> Iterator[None]:
    """The operator installed by README's Helm commands, run verbatim: two pods under the chart's
    ServiceAccount (RBAC enforced by the API server), one reconciling while it holds the Lease."""
    commands = readme_commands("helm install")
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", commands],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, f"README's install failed:\n{commands}\n{result.stdout}\n{result.stderr}"
    try:
        yield
    finally:
        subprocess.run(
            ["helm", "uninstall", "triton-operator", "--namespace", "triton-system", "--wait"],
            env=environment(), capture_output=True, timeout=180,
        )  # fmt: skip
        kubectl("delete", "namespace", "triton-system", "--timeout=120s", check=False, timeout=180)
