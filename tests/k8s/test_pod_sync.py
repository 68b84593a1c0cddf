"""The worker's pod sync without Kubernetes or Triton: pods stand in as index entries, replicas as fakes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from triton_operator.decide.seen import Pod
from triton_operator.k8s.pods import pod_sync as pods_module
from triton_operator.k8s.pods.pod_sync import PodSync
from triton_operator.k8s.process.settings import Settings
from triton_operator.k8s.watch.indexes import Indexes
from triton_operator.triton.sync import ReplicaReport

KEY = ("ml", "triton")
SERVER, DEPLOYMENT, REPLICA_SET = "uid-triton", "uid-deployment", "uid-replicaset"  # the pods' owner chain


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


class FakeReplica:
    """What PodSync needs of a Replica besides its sync; nothing fails every request."""

    def __init__(self, client: Any, parallel_loads: int, **_: Any):
        self.client = client
        self.reading_since: float | None = None

    def heal(self, desired: Any, statistics: Any, report: ReplicaReport, progress: Any) -> None:
        pass

    async def close(self) -> None:
        pass


def pod(
    name: str, address: str | None = "10.0.0.1:8001", deleting: bool = False, models_ready: str | None = None
) -> Pod:
    return Pod(name, f"uid-{name}", address, deleting, models_ready, fingerprint="", owner=REPLICA_SET)


def pod_sync(
    monkeypatch: pytest.MonkeyPatch,
    pods: list[Pod],
    replica: type,
    api: Conditions,
    wake: Any = lambda: None,
    **settings: Any,
) -> PodSync:
    monkeypatch.setattr(pods_module, "Replica", replica)
    monkeypatch.setattr(pods_module, "ControlClient", Client)
    return PodSync(KEY, indexes_of(KEY, pods), api, Settings(**settings), wake)  # type: ignore[arg-type]


def indexes_of(key: tuple[str, str], pods: list[Pod]) -> Indexes:
    """Indexes holding the server `key` and its `pods`, each owned through the chain pods_of follows (their
    owner REPLICA_SET, its Deployment, the server)."""
    return Indexes(
        servers={key: [{"metadata": {"uid": SERVER}}]},
        models={},
        pods={key: pods},
        config_maps={},
        models_by_config_map={},
        selector_models={},
        replica_sets={(key[0], REPLICA_SET): [DEPLOYMENT]},
        deployments={(key[0], DEPLOYMENT): [SERVER]},
    )  # type: ignore[arg-type]


def test_pods_are_synced_in_parallel_within_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    running = most = 0

    class SlowReplica(FakeReplica):
        async def sync(
            self, desired: Any, managed: Any, progress: Any, keep: Any, settle_seconds: Any = None
        ) -> ReplicaReport:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.02)
            running -= 1
            return ReplicaReport(self.client.url)

    live = [pod(f"p{i}", f"10.0.0.{i}:8001") for i in range(10)]
    api = Conditions()
    sync = pod_sync(
        monkeypatch, [*live, pod("new", address=None), pod("old", deleting=True)], SlowReplica, api, parallel_pods=3
    )

    seen = asyncio.run(sync.sync({}, set(), set(), "key"))
    assert most == 3
    assert sorted(seen.reports) == sorted(p.name for p in live)  # no address, or terminating: not synced
    assert sorted(api.written) == sorted((p.name, "True") for p in live) and seen.ready_pods == sorted(
        p.name for p in live
    )
    assert not seen.settled  # a pod is still waiting for its address


def test_a_slow_pod_delays_only_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass reports within one read timeout; the slow pod's sync goes on, is never doubled, and its end
    (with an answer) wakes the worker for another pass."""
    release = asyncio.Event()

    class Replica(FakeReplica):
        async def sync(
            self, desired: Any, managed: Any, progress: Any, keep: Any, settle_seconds: Any = None
        ) -> ReplicaReport:
            if self.client.url.startswith("slow"):
                await release.wait()  # a long load
            return ReplicaReport(self.client.url)

    async def scenario() -> None:
        woken = asyncio.Event()
        api = Conditions()
        sync = pod_sync(
            monkeypatch,
            [pod("healthy", "ok:1"), pod("slow", "slow:1", models_ready="True")],
            Replica,
            api,
            wake=woken.set,
            read_timeout_seconds=0.2,
        )
        first = await asyncio.wait_for(sync.sync({}, set(), set(), "key"), 5)
        assert first.waiting == ["slow"] and list(first.reports) == ["healthy"] and not first.settled
        assert api.written == [("healthy", "True")] and first.ready_pods == [
            "healthy",
            "slow",
        ]  # the slow one stays in service
        assert first.loaded_on("any") == ["slow"]  # it may still hold a model being unloaded
        second = await asyncio.wait_for(sync.sync({}, set(), set(), "key"), 5)
        assert second.waiting == ["slow"]  # never synced twice at once
        release.set()
        await asyncio.wait_for(woken.wait(), 5)  # its end asks for another pass
        third = await asyncio.wait_for(sync.sync({}, set(), set(), "key"), 5)
        assert not third.waiting and third.settled and third.ready_pods == ["healthy", "slow"]
        await sync.close()

    asyncio.run(scenario())


def test_a_hung_pod_is_reported_unreachable_and_keeps_its_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sync that ends without an answer after its pass moved on wakes nobody (the worker's backoff
    retries it); the next pass reports the pod unreachable from it, and its gate is never touched."""

    class Replica(FakeReplica):
        async def sync(
            self, desired: Any, managed: Any, progress: Any, keep: Any, settle_seconds: Any = None
        ) -> ReplicaReport:
            if self.client.url.startswith("hung"):
                await asyncio.sleep(0.4)  # retries that time out
                return ReplicaReport(self.client.url, error="deadline exceeded")
            return ReplicaReport(self.client.url)

    async def scenario() -> None:
        woken = asyncio.Event()
        api = Conditions()
        sync = pod_sync(
            monkeypatch,
            [pod("healthy", "ok:1"), pod("hung", "hung:1", models_ready="True")],
            Replica,
            api,
            wake=woken.set,
            read_timeout_seconds=0.2,
        )
        first = await asyncio.wait_for(sync.sync({}, set(), set(), "key"), 5)
        assert first.waiting == ["hung"]
        await asyncio.wait_for(asyncio.gather(*sync.running.values()), 5)
        assert not woken.is_set()
        second = await asyncio.wait_for(sync.sync({}, set(), set(), "key"), 5)
        assert second.waiting == [] and second.reports["hung"].error == "deadline exceeded" and second.unreachable
        assert second.ready_pods == ["healthy", "hung"] and ("hung", "False") not in api.written
        await sync.close()

    asyncio.run(scenario())
