"""A worker whose index has not yet seen a child it created: the API server's watch can trail the worker's
own creates by seconds when thousands of objects change at once. On the emulated API server."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import kopf
import pytest

from tests.support.operator import NAMESPACE, Cluster, api_server
from triton_operator.k8s.api import KubernetesApi
from triton_operator.k8s.expectations import Written
from triton_operator.k8s.server.children import Children
from triton_operator.k8s.watch.indexes import Indexes

SERVER_UID = "server-uid"


def config_map(data: str, owner: str | None = SERVER_UID) -> dict[str, Any]:
    reference = {"apiVersion": "triton.nvidia.com/v1alpha1", "kind": "TritonServer", "name": "triton"}
    references = [{**reference, "uid": owner, "controller": True}] if owner else []
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "add-config", "namespace": NAMESPACE, "ownerReferences": references},
        "data": {"config.pbtxt": data},
    }


@pytest.fixture
async def cluster_and_children() -> AsyncIterator[tuple[Cluster, Children]]:
    async with api_server() as cluster:
        api = KubernetesApi()
        info = kopf.ConnectionInfo(server=cluster.url, insecure=True, token="operator")

        async def login() -> kopf.ConnectionInfo:
            return info

        api.authenticate(info, login)
        lagging = Indexes({}, {}, {}, {}, {}, {}, {}, {})  # type: ignore[arg-type]
        try:
            yield cluster, Children((NAMESPACE, "triton"), lagging, api)
        finally:
            await api.close()


async def test_a_child_it_made_that_its_index_has_not_seen_is_written_over_not_failed(
    cluster_and_children: tuple[Cluster, Children], caplog: pytest.LogCaptureFixture
) -> None:
    cluster, children = cluster_and_children
    await cluster.create(config_map("a"))  # made a pass ago; the index has not seen it

    with caplog.at_level(logging.WARNING):
        assert await children.apply([(config_map("b"), "fingerprint-b")])

    assert cluster.get("ConfigMap", "add-config")["data"] == {"config.pbtxt": "b"}
    written = Written("ConfigMap", NAMESPACE, "add-config")
    assert children.expectations.expected(written) == "fingerprint-b" and not children.taken
    assert not caplog.records, [record.getMessage() for record in caplog.records]


async def test_a_name_another_object_holds_is_left_alone_though_the_index_has_not_seen_it(
    cluster_and_children: tuple[Cluster, Children],
) -> None:
    cluster, children = cluster_and_children
    await cluster.create(config_map("users", owner=None))

    assert not await children.apply([(config_map("b"), "fingerprint-b")])

    assert cluster.get("ConfigMap", "add-config")["data"] == {"config.pbtxt": "users"}
    assert "ConfigMap add-config exists" in children.taken["ConfigMap/add-config"]
    assert children.expectations.expected(Written("ConfigMap", NAMESPACE, "add-config")) is None
