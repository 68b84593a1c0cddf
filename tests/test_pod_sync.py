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


def indexes(pods: list[Pod]) -> Indexes:
    return Indexes(servers={}, models={}, pods={KEY: pods}, config_maps={}, models_by_config_map={})  # type: ignore[arg-type]


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

    class Client:
        def __init__(self, url: str, key: str, timeouts: Any):
            self.url = url

        async def statistics(self) -> dict[str, Any]:
            return {}

        async def close(self) -> None:
            pass

    monkeypatch.setattr(pods_module, "Replica", SlowReplica)
    monkeypatch.setattr(pods_module, "ControlClient", Client)
    live = [Pod(f"p{i}", f"u{i}", f"10.0.0.{i}:8001", deleting=False, models_ready=None, fingerprint="") for i in range(10)]
    waiting = [Pod("new", "u-new", None, deleting=False, models_ready=None, fingerprint=""), Pod("old", "u-old", "10.0.0.99:8001", deleting=True, models_ready=None, fingerprint="")]
    api = Conditions()
    sync = PodSync(KEY, indexes(live + waiting), api, Settings(parallel_pods=3))  # type: ignore[arg-type]

    seen = asyncio.run(sync.sync({}, set(), set(), "key"))
    assert most == 3
    assert sorted(seen.reports) == sorted(pod.name for pod in live)  # no address, or terminating: not synced
    assert sorted(api.written) == sorted((pod.name, "True") for pod in live) and sorted(seen.ready_pods) == sorted(pod.name for pod in live)
    assert not seen.settled  # a pod is still waiting for its address
