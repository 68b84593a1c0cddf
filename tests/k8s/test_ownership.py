"""Locked down: the operator writes only what it made, caches only the ConfigMaps it reads, and rotates
the control key. On the emulated API server, with a real tritonserver where a model must load."""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
from typing import Any

import pytest

from tests.support.operator import Cluster, Pods, api_server, running_operator
from tests.support.resources import FILES, MODEL, SERVER
from triton_operator.k8s.server.key_secrets import KEY_MADE_ANNOTATION, KEY_REQUEST_ANNOTATION, rotation_due
from triton_operator.k8s.server.ownership import taken
from triton_operator.k8s.watch.handlers import Operator
from triton_operator.k8s.watch.indexes import ROTATE_ANNOTATION, unread
from triton_operator.render.manifests import CONTROL_KEY, key_digest


def _owned_by(uid: str | None, controller: bool = True) -> dict[str, Any]:
    references = (
        [] if uid is None else [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": uid, "controller": controller}]
    )
    return {"metadata": {"name": "triton", "ownerReferences": references}}


@pytest.mark.parametrize(
    "desired_owner, exists, holder, expected",
    [
        ("server-uid", False, None, False),  # a free name is made
        ("server-uid", True, "server-uid", False),  # the operator's own object is written over
        ("server-uid", True, None, True),  # a user's object, or the operator's with its ownerReference removed
        (
            "server-uid",
            True,
            "other-uid",
            True,
        ),  # another owner's, or a TritonServer of the same name deleted and made again
        (None, False, None, False),  # an owner not made yet: only a free name
        (None, True, None, True),
    ],
)
def test_a_name_is_taken_unless_free_or_controlled_by_the_owner(
    desired_owner: str | None, exists: bool, holder: str | None, expected: bool
) -> None:
    assert taken(_owned_by(desired_owner), exists, holder) is expected


def test_a_reference_that_is_not_the_controller_does_not_make_an_object_ours() -> None:
    assert taken(_owned_by("server-uid"), True, None)
    assert taken(_owned_by("server-uid", controller=False), False, None) is False


NOW = datetime.datetime(2025, 6, 1, tzinfo=datetime.UTC)
DAY = 86400.0


def _secret(
    made: str | None = None, request: str | None = None, created: str = "2025-05-01T00:00:00Z"
) -> dict[str, Any]:
    annotations = {
        key: value
        for key, value in ((KEY_MADE_ANNOTATION, made), (KEY_REQUEST_ANNOTATION, request))
        if value is not None
    }
    return {"metadata": {"annotations": annotations, "creationTimestamp": created}}


@pytest.mark.parametrize(
    "requested, secret, max_age, due",
    [
        (None, _secret(), 0, False),  # no request, no schedule
        ("1", _secret(request=""), 0, True),  # a first request
        ("1", _secret(request="1"), 0, False),  # the request the key was made for
        ("2", _secret(request="1"), 0, True),  # a new value
        ("", _secret(), 0, False),  # an empty value asks nothing
        (None, _secret(), 40 * DAY, False),  # made 31 days ago (creation, no annotation), 40 allowed
        (None, _secret(), 30 * DAY, True),
        (
            None,
            _secret(made="2025-05-31T00:00:00Z"),
            30 * DAY,
            False,
        ),  # rotated a day ago: the annotation counts, not the creation
    ],
)
def test_the_key_rotates_on_a_new_request_or_past_its_age(
    requested: str | None, secret: dict[str, Any], max_age: float, due: bool
) -> None:
    assert (rotation_due(requested, secret, NOW, max_age) is not None) is due


def _ready(cluster: Cluster) -> dict[str, Any]:
    return cluster.condition("TritonServer", "triton", "Ready") or {}


async def test_a_service_someone_else_made_under_the_servers_name_is_left_alone_and_reported() -> None:
    users_service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "triton", "labels": {"team": "web"}},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]},
    }
    async with api_server() as cluster, running_operator(cluster, retry_seconds=0.2):
        before = await cluster.create(copy.deepcopy(users_service))
        for obj in (SERVER, FILES, MODEL):
            await cluster.create(copy.deepcopy(obj))
        ready = await cluster.wait(
            "NameTaken", lambda: _ready(cluster).get("reason") == "NameTaken" and _ready(cluster)
        )
        assert (
            ready["status"] == "False"
            and "Service triton" in ready["message"]
            and "rename the TritonServer" in ready["message"]
        )
        owned = cluster.condition("TritonServer", "triton", "ChildrenOwned") or {}
        assert owned.get("status") == "False" and owned.get("reason") == "NameTaken"
        # The other children go on: the Deployment, the control Secret and the model's config.
        await cluster.wait(
            "the free children",
            lambda: all(
                cluster.get(k, n)
                for k, n in [("Deployment", "triton"), ("Secret", "triton-control"), ("ConfigMap", "add-config")]
            ),
        )
        after = cluster.get("Service", "triton")
        assert (
            after is not None and after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        )  # never written
        assert after["spec"]["selector"] == {"app": "web"} and not after["metadata"].get("ownerReferences")

        await cluster.delete("Service", "triton")  # the way out the condition names
        service = await cluster.wait(
            "the operator's Service",
            lambda: (s := cluster.get("Service", "triton")) and s["metadata"].get("ownerReferences") and s,
        )
        assert (
            service["metadata"]["ownerReferences"][0]["uid"] == cluster.get("TritonServer", "triton")["metadata"]["uid"]
        )
        await cluster.wait(
            "ChildrenOwned",
            lambda: (cluster.condition("TritonServer", "triton", "ChildrenOwned") or {}).get("status") == "True",
        )


async def test_a_rotate_annotation_replaces_the_key_and_rolls_the_pods() -> None:
    async with (
        api_server() as cluster,
        running_operator(cluster, resync_seconds=600),
    ):  # the annotation wakes the worker, not the resync
        await cluster.create(copy.deepcopy(SERVER))

        def template_digest() -> str | None:
            deployment = cluster.get("Deployment", "triton") or {}
            return (
                (((deployment.get("spec") or {}).get("template") or {}).get("metadata") or {})
                .get("annotations", {})
                .get(CONTROL_KEY.digest_annotation)
            )

        first = await cluster.wait("the first key", lambda: template_digest() and cluster.control_key("triton"))
        assert template_digest() == key_digest(first)

        await cluster.patch("TritonServer", "triton", {"metadata": {"annotations": {ROTATE_ANNOTATION: "2025-06-01"}}})
        second = await cluster.wait("a new key", lambda: (key := cluster.control_key("triton")) != first and key)
        await cluster.wait("the pods rolled to it", lambda: template_digest() == key_digest(second))
        secret = cluster.get("Secret", "triton-control")
        assert secret["metadata"]["annotations"][KEY_REQUEST_ANNOTATION] == "2025-06-01"
        await cluster.wait(
            "the Event",
            lambda: any(e["reason"] == "ControlKeyRotated" and e["type"] == "Normal" for e in cluster.all("Event")),
        )
        assert cluster.get("TritonServer", "triton").get("spec") == SERVER["spec"]  # spec is never written


def cached_bytes(operator: Operator) -> int:
    """What the ConfigMap index holds, as JSON: about the memory its values take."""
    index = operator.workers.indexes.config_maps if operator.workers.indexes else {}
    return sum(len(json.dumps(view)) for key in index for view in index[key])


@pytest.mark.slow
@pytest.mark.triton
async def test_unrelated_configmaps_cost_the_operator_next_to_nothing_and_a_model_still_loads_one(pods: Pods) -> None:
    async with (
        api_server(request_history=16) as cluster,
        running_operator(cluster) as operator,
    ):  # a short history: it is searched on each request
        await cluster.create(copy.deepcopy(SERVER))
        await cluster.create(copy.deepcopy(FILES))  # before any model names it: indexed unread
        blob = "x" * (
            (1 << 20) - 4096
        )  # as much as a ConfigMap holds: the API server (and the emulator) takes bodies up to 1 MiB
        for start in range(0, 1000, 50):
            batch = [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"unrelated-{i}"},
                    "data": {"blob": blob},
                }
                for i in range(start, start + 50)
            ]
            await asyncio.gather(*(cluster.create(obj) for obj in batch))

        def all_indexed() -> bool:
            index = operator.workers.indexes.config_maps if operator.workers.indexes else {}
            return ("default", "unrelated-999") in index and ("default", FILES["metadata"]["name"]) in index

        await cluster.wait("every ConfigMap indexed", all_indexed, timeout=120)
        held = cached_bytes(operator)
        assert held < 200 * 1000, f"{held} bytes held for 1,000 ConfigMaps of 1 MiB"  # their data: 1,000 MiB
        assert unread(next(iter(operator.workers.indexes.config_maps[("default", FILES["metadata"]["name"])])))

        await cluster.create(copy.deepcopy(MODEL))
        key = await cluster.wait("the key", lambda: cluster.control_key("triton"))
        triton = await asyncio.to_thread(pods.start, "triton-a", key)
        await cluster.add_pod("triton", "triton-a", triton.address, triton.ports.grpc)
        await cluster.wait(
            "the model ready",
            lambda: (cluster.condition("TritonModel", "add", "Ready") or {}).get("status") == "True",
            timeout=120,
        )
        assert cached_bytes(operator) < 200 * 1000 + 10 * len(FILES["data"]["model.py"])
