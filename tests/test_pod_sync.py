"""The worker's pod sync without Kubernetes or Triton: pods stand in as index entries, replicas as fakes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from triton_operator.k8s import pods as pods_module
from triton_operator.k8s.pods import PodSync
from triton_operator.k8s.settings import Settings
from triton_operator.k8s.state import Indexes, Pod
from triton_operator.triton.sync import ReplicaReport

KEY = ("ml", "triton")


class Conditions:
    """Stands in for the API client: records each pod condition written."""

    def __init__(self) -> None:
        self.written: list[tuple[str, str]] = []

    async def set_pod_condition(self, namespace: str, name: str, condition: dict[str, Any]) -> None:
        self.written.append((name, condition["status"]))


class Client:
    def __init__(self, url: str, key: str, timeouts: Any):
        self.url = url

    async def statistics(self) -> dict[str, Any]:
        return {}

    async def close(self) -> None:
        pass


def pod(name: str, address: str | None = "10.0.0.1:8001", deleting: bool = False, models_ready: str | None = None) -> Pod:
    return Pod(name, f"uid-{name}", address, deleting=deleting, models_ready=models_ready, fingerprint="")


def pod_sync(monkeypatch: pytest.MonkeyPatch, pods: list[Pod], replica: type, api: Conditions, wake: Any = lambda: None, **settings: Any) -> PodSync:
    monkeypatch.setattr(pods_module, "Replica", replica)
    monkeypatch.setattr(pods_module, "ControlClient", Client)
    indexes = Indexes(servers={}, models={}, pods={KEY: pods}, config_maps={}, models_by_config_map={})  # type: ignore[arg-type]
    return PodSync(KEY, indexes, api, Settings(**settings), wake)  # type: ignore[arg-type]


def test_pods_are_synced_in_parallel_within_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    running = most = 0

    class SlowReplica:
        def __init__(self, client: Any, parallel_loads: int):
            self.client = client

        async def sync(self, desired: Any, managed: Any, progress: Any, keep: Any) -> ReplicaReport:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.02)
            running -= 1
            return ReplicaReport(self.client.url)

    live = [pod(f"p{i}", f"10.0.0.{i}:8001") for i in range(10)]
    api = Conditions()
    sync = pod_sync(monkeypatch, [*live, pod("new", address=None), pod("old", deleting=True)], SlowReplica, api, parallel_pods=3)

    seen = asyncio.run(sync.sync({}, set(), set(), "key"))
    assert most == 3
    assert sorted(seen.reports) == sorted(p.name for p in live)  # no address, or terminating: not synced
    assert sorted(api.written) == sorted((p.name, "True") for p in live) and seen.ready_pods == sorted(p.name for p in live)
    assert not seen.settled  # a pod is still waiting for its address


def test_a_hung_pod_delays_only_itself_and_keeps_its_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass reports within one read timeout; the hung pod's sync goes on and wakes the worker when it ends;
    a pod that did not answer keeps the gate it had (fail static)."""
    release = asyncio.Event()

    class Replica:
        def __init__(self, client: Any, parallel_loads: int):
            self.client = client

        async def sync(self, desired: Any, managed: Any, progress: Any, keep: Any) -> ReplicaReport:
            if self.client.url.startswith("hung"):
                await release.wait()
                return ReplicaReport(self.client.url, error="deadline exceeded")
            return ReplicaReport(self.client.url)

    async def scenario() -> None:
        woken = asyncio.Event()
        api = Conditions()
        pods = [pod("healthy", "ok:1"), pod("hung", "hung:1", models_ready="True")]
        sync = pod_sync(monkeypatch, pods, Replica, api, wake=woken.set, read_timeout_seconds=0.2)
        first = await asyncio.wait_for(sync.sync({}, set(), set(), "key"), 5)
        assert first.waiting == ["hung"] and list(first.reports) == ["healthy"] and not first.settled
        assert api.written == [("healthy", "True")] and first.ready_pods == ["healthy", "hung"]  # the hung one stays in service
        assert first.loaded_on("any") == ["hung"]  # it may still hold a model being unloaded
        second = await asyncio.wait_for(sync.sync({}, set(), set(), "key"), 5)
        assert second.waiting == ["hung"]  # never synced twice at once
        release.set()
        await asyncio.wait_for(woken.wait(), 5)  # its end asks for another pass
        third = await asyncio.wait_for(sync.sync({}, set(), set(), "key"), 5)
        assert not third.waiting and third.reports["hung"].error and third.ready_pods == ["healthy", "hung"]
        assert ("hung", "False") not in api.written  # no answer never takes a pod out of service
        await sync.close()

    asyncio.run(scenario())
