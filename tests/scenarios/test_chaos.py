"""The chaos suite: faults the operator must heal by itself, each with its bound.

Each test injects one fault on the emulated API server (tests/support/faults.py), with real
tritonservers as pods where a pod is involved, and asserts how long the operator took to heal it,
measured around waits on the cluster's state, never decided by a sleep.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from tests.support.faults import drop, stall
from tests.support.operator import NAMESPACE, PATHS, Cluster, Pods, api_server, running_operator
from tests.support.resources import FILES, MODEL, SERVER
from tests.support.serving import add_pod, serve_add_model

# How long the operator may take to act on what it was told (a pass: render, write, sync a pod).
PASS_BOUND = 5.0
# A pass that loads a python-backend model on a Triton that just started (its stub starts too).
LOAD_BOUND = 15.0


async def healed_within(cluster: Cluster, bound: float, what: str, check: Callable[[], Any]) -> Any:
    """Wait for `check` (up to twice the bound, so a slow heal shows how slow) and assert it came within `bound`
    seconds."""
    start = time.monotonic()
    result = await cluster.wait(what, check, timeout=2 * bound)
    elapsed = time.monotonic() - start
    assert elapsed < bound, f"{what}: after {elapsed:.1f}s, over the bound of {bound:.0f}s"
    return result


def one_replica_server() -> dict[str, Any]:
    server = copy.deepcopy(SERVER)
    server["spec"]["replicas"] = 1
    return server


def loaded(cluster: Cluster, model: str = "add") -> bool:
    condition = cluster.condition("TritonModel", model, "Loaded") or {}
    return condition.get("status") == "True"


def events(cluster: Cluster, reason: str) -> list[dict[str, Any]]:
    return [event for event in cluster.all("Event") if event.get("reason") == reason]


async def test_a_server_without_models_is_reconciled_and_restored_after_a_restart() -> None:
    async with api_server() as cluster:
        children = [("Deployment", "triton"), ("Service", "triton"), ("Secret", "triton-control")]
        async with running_operator(cluster) as operator:
            await cluster.create(copy.deepcopy(SERVER))
            await healed_within(
                cluster,
                PASS_BOUND,
                "a lone server's children and status",
                lambda: (
                    all(cluster.get(*child) for child in children)
                    and (cluster.get("TritonServer", "triton") or {}).get("status")
                ),
            )
            # Workers are woken on the event loop only: a wake from another thread is refused, not lost.
            worker = operator.workers.get(("default", "triton"))
            with pytest.raises(RuntimeError):
                await asyncio.to_thread(worker.wake)

        await cluster.delete("Deployment", "triton")
        async with running_operator(cluster):
            await healed_within(
                cluster,
                PASS_BOUND,
                "the Deployment restored after a restart",
                lambda: cluster.get("Deployment", "triton"),
            )


@pytest.mark.triton
async def test_a_deleted_control_key_secret_comes_back_with_the_key_the_pods_run_with(pods: Pods) -> None:
    resync = 1.0
    async with api_server() as cluster, running_operator(cluster, resync_seconds=resync):
        key = await serve_add_model(cluster, pods, ("triton-a",))
        await cluster.wait("the model loaded", lambda: loaded(cluster))
        template = cluster.get("Deployment", "triton")["spec"]["template"]

        await cluster.delete("Secret", "triton-control")
        await healed_within(
            cluster, resync + PASS_BOUND, "the Secret made again", lambda: cluster.control_key("triton")
        )
        assert cluster.control_key("triton") == key, "the Secret came back with another key than the pods run with"
        [event] = await cluster.wait("the ControlKeyRecreated Event", lambda: events(cluster, "ControlKeyRecreated"))
        assert event["involvedObject"]["kind"] == "TritonServer" and event["involvedObject"]["name"] == "triton"
        assert cluster.get("Deployment", "triton")["spec"]["template"] == template, (
            "the same key must not roll the pods"
        )
        await cluster.wait(
            "the pod still in sync",
            lambda: loaded(cluster) and (cluster.pod_condition("triton-a") or {}).get("status") == "True",
        )
        assert not events(cluster, "ControlKeyRotated")


@pytest.mark.triton
async def test_a_new_control_key_rolls_the_pods(pods: Pods, caplog: pytest.LogCaptureFixture) -> None:
    """The Secret gone while the operator was down: the key the pods run with is lost, a new one is
    made, and the pods roll to it (nothing else would give them the new key)."""
    async with api_server() as cluster:
        async with running_operator(cluster):
            old_key = await serve_add_model(cluster, pods, ("triton-a",))
            await cluster.wait("the model loaded", lambda: loaded(cluster))
        template = cluster.get("Deployment", "triton")["spec"]["template"]
        await cluster.delete("Secret", "triton-control")

        with caplog.at_level(logging.WARNING, logger="triton_operator"):
            async with running_operator(cluster):
                new_key = await healed_within(
                    cluster, PASS_BOUND, "a new control key", lambda: cluster.control_key("triton")
                )
                assert new_key != old_key
                await healed_within(
                    cluster,
                    PASS_BOUND,
                    "the pod template changed",
                    lambda: cluster.get("Deployment", "triton")["spec"]["template"] != template,
                )
                [event] = await cluster.wait(
                    "the ControlKeyRotated Event", lambda: events(cluster, "ControlKeyRotated")
                )
                assert event["type"] == "Warning" and event["involvedObject"]["name"] == "triton"
                await cluster.wait("the refused key logged", lambda: _refusals_logged(caplog, "triton-a"))

                # The roll, as the Deployment makes it: the old pod goes, a new one starts with the new key.
                await asyncio.to_thread(pods.tritons["triton-a"].stop)
                await cluster.delete("Pod", "triton-a")
                await add_pod(cluster, pods, "triton-b", new_key)
                await healed_within(cluster, LOAD_BOUND, "the model loaded on the new pod", lambda: loaded(cluster))


def _refusals_logged(caplog: pytest.LogCaptureFixture, pod: str) -> bool:
    return any(
        r.levelno == logging.WARNING and pod in r.getMessage() and "refuses the control key" in r.getMessage()
        for r in caplog.records
    )


@pytest.mark.triton
async def test_a_model_deleted_after_its_server_is_released_at_once(pods: Pods) -> None:
    async with api_server() as cluster, running_operator(cluster):
        await serve_add_model(cluster, pods, ("triton-a",))
        await cluster.wait("the model loaded", lambda: loaded(cluster))

        await cluster.delete("TritonServer", "triton")
        await cluster.delete("Pod", "triton-a")  # as the garbage collector removes a deleted server's pods
        await cluster.wait(
            "the server seen gone",
            lambda: (cluster.condition("TritonModel", "add", "Loaded") or {}).get("reason") == "ServerNotFound",
        )
        await cluster.delete("TritonModel", "add")
        await healed_within(
            cluster, PASS_BOUND, "the model's finalizer released", lambda: cluster.get("TritonModel", "add") is None
        )


async def test_a_stalled_watch_stream_is_dropped_and_the_operator_catches_up() -> None:
    client_timeout = 2.0
    timeouts = {
        "watch_server_timeout_seconds": 1,
        "watch_client_timeout_seconds": client_timeout,
        "watch_connect_timeout_seconds": 1,
    }
    waiting = copy.deepcopy(MODEL)
    waiting["spec"]["serverRef"] = {"name": "later"}
    async with api_server() as cluster, running_operator(cluster, **timeouts):
        await cluster.create(copy.deepcopy(waiting))
        await cluster.wait("the first model's status", lambda: cluster.condition("TritonModel", "add", "Loaded"))

        # Every open watch goes silent: no event, no end; the API server's own timeout never arrives.
        assert stall(cluster.server.watches, ".")
        second = copy.deepcopy(waiting)
        second["metadata"]["name"] = "second"
        await cluster.create(second)
        await healed_within(
            cluster,
            client_timeout + PASS_BOUND,
            "a model made during the stall seen",
            lambda: cluster.condition("TritonModel", "second", "Loaded"),
        )


async def test_dropped_watch_streams_are_watched_again_and_nothing_is_missed() -> None:
    async with api_server() as cluster, running_operator(cluster):
        for obj in (SERVER, FILES, MODEL):
            await cluster.create(copy.deepcopy(obj))
        config = await cluster.wait(
            "the config ConfigMap", lambda: (cluster.get("ConfigMap", "add-config") or {}).get("data")
        )

        # The API server closes every TritonModel watch at the next event: the edit itself is lost with it.
        assert drop(cluster.server.watches, "tritonmodels")
        await cluster.patch(
            "TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": 900}}}}
        )
        await healed_within(
            cluster,
            PASS_BOUND,
            "the edit seen through a new watch",
            lambda: cluster.get("ConfigMap", "add-config")["data"] != config,
        )
        assert "max_queue_delay_microseconds: 900" in cluster.get("ConfigMap", "add-config")["data"]["config.pbtxt"]


async def first_watch_event(cluster: Cluster, kind: str, resource_version: str | None) -> dict[str, Any]:
    path = (
        PATHS[kind].format(ns=NAMESPACE)
        + "?watch=true"
        + (f"&resourceVersion={resource_version}" if resource_version else "")
    )
    async with aiohttp.ClientSession() as session, session.get(cluster.url + path) as response:
        async for line in response.content:
            if line.strip():
                return json.loads(line)
    raise AssertionError("the watch ended without an event")


async def test_a_watch_from_a_resource_version_gets_only_what_changed_after_it() -> None:
    """The emulator's rule kopf's resumed watches rely on (tests/support/cluster.py): without it each
    watch the operator opens again replays every object."""
    async with api_server() as cluster:
        for name in ("older", "edited"):
            await cluster.create(copy.deepcopy(FILES) | {"metadata": {"name": name}})
        listed = await cluster.request("GET", PATHS["ConfigMap"].format(ns=NAMESPACE))
        await cluster.patch("ConfigMap", "edited", {"data": {"model.py": "# edited"}})
        assert (await first_watch_event(cluster, "ConfigMap", None))["object"]["metadata"]["name"] == "older"
        resumed = await first_watch_event(cluster, "ConfigMap", listed["metadata"]["resourceVersion"])
        assert resumed["object"]["metadata"]["name"] == "edited" and resumed["object"]["data"]["model.py"] == "# edited"


async def test_a_status_write_gives_the_object_a_new_resource_version() -> None:
    """The emulator's rule the operator's kept parses rely on (k8s/server/kept.py parses an object once per
    resourceVersion): without it a model's index entry is parsed once, its status never seen again, and
    every status the worker wrote stays expected, unconfirmed (k8s/expectations.py)."""
    async with api_server() as cluster:
        created = await cluster.create(copy.deepcopy(MODEL))
        written = await cluster.patch("TritonModel", "add", {"status": {"replicas": "0/1"}}, subresource="status")
        assert written["status"]["replicas"] == "0/1"
        assert int(written["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
        assert written["metadata"].get("generation") == created["metadata"].get("generation")


async def test_a_status_write_drops_the_keys_the_new_status_leaves_out() -> None:
    async with api_server() as cluster, running_operator(cluster):
        for obj in (one_replica_server(), FILES, MODEL):
            await cluster.create(copy.deepcopy(obj))
        await cluster.wait(
            "the model's replicas", lambda: (cluster.get("TritonModel", "add") or {}).get("status", {}).get("replicas")
        )

        await cluster.delete("TritonServer", "triton")
        status = await healed_within(
            cluster,
            PASS_BOUND,
            "the model waiting for its server",
            lambda: (
                (cluster.condition("TritonModel", "add", "Loaded") or {}).get("reason") == "ServerNotFound"
                and cluster.get("TritonModel", "add")["status"]
            ),
        )
        left = {key: status[key] for key in ("replicas", "sharedMemoryBytes") if key in status}
        assert not left, f"kept from the last status beside replicaStates={status.get('replicaStates')}: {left}"
