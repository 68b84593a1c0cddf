"""The e2e tier's cluster: a control plane of its own for the session, or the user's test cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.controlplane import control_plane
from tests.support.controlplane.network import can_make_networks
from tests.support.e2e import USER_CONTEXT, TestCluster, current, not_run_reason, use


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
        cluster = TestCluster("triton-test", str(plane.kubeconfig), has_nodes=bool(nodes), audit_log=plane.audit_log)
        use(cluster)
        try:
            yield cluster
        finally:
            use(None)


@pytest.fixture(scope="session")  # session: it skips before a module's fixtures start anything
def e2e_nodes(e2e_cluster: TestCluster) -> None:
    if not current().has_nodes:
        pytest.skip("NOT RUN: needs a node, which runs pods in network namespaces: root and `ip` are needed")
