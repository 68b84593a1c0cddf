"""Serving through change on the mini cluster: the clients of tests/support/traffic.py send through
the Service while the server scales up and down, rolls every pod for a flag, and reloads a model in
place; each counts what failed. Then the same scale-down with no preStop delay, to show the
measurement sees failures. tests/e2e/test_serving_on_the_cluster.py does the same on the real
control plane.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient

from tests.support.minicluster import MiniCluster, operated_cluster
from tests.support.minicluster.controller import is_ready, is_terminating
from tests.support.resources import FILES, MODEL
from tests.support.serving import model_ready_at
from tests.support.traffic import (
    AGE_MS,
    STREAM,
    Client,
    clients,
    drained_server,
    failures,
    http_model,
    sent,
    ticker_model,
)
from triton_operator.protocol.names import GRPC_CONTROL_METADATA

pytestmark = [pytest.mark.triton, pytest.mark.slow]

PROPAGATION_SECONDS = 0.5  # the Service's endpoints follow the pods this much later


def serving_pods(mini: MiniCluster) -> list[dict[str, Any]]:
    return [pod for pod in mini.pods_of("triton") if is_ready(pod) and not is_terminating(pod)]


async def scale(mini: MiniCluster, replicas: int) -> None:
    """Through the scale subresource, as kubectl scale or an HPA does."""
    await mini.cluster.request(
        "PATCH",
        "/apis/triton-operator.io/v1alpha1/namespaces/default/tritonservers/triton/scale",
        {"spec": {"replicas": replicas}},
        "application/merge-patch+json",
    )


def proxied(mini: MiniCluster, port: str) -> set[str]:
    """The pods the Service's port sends new connections to now (its endpoints as last applied)."""
    applied = [change for change in mini.services.changes if change.service == "triton" and change.port == port]
    return set(applied[-1].pods) if applied else set()


async def settled(mini: MiniCluster, replicas: int, what: str) -> None:
    """`replicas` pods serving the model, none terminating, the model ready on each, and the Service
    sending to exactly those pods."""

    def done() -> bool:
        pods = mini.pods_of("triton")
        ready = [
            (mini.cluster.get("TritonModel", name) or {}).get("status", {}).get("replicas")
            for name in ("add", "add-http", "ticker")
        ]
        names = {pod["metadata"]["name"] for pod in serving_pods(mini)}
        in_service = len(pods) == replicas == len(names) and ready == [f"{replicas}/{replicas}"] * 3
        return in_service and proxied(mini, "grpc") == names == proxied(mini, "http")

    await mini.cluster.wait(what, done, timeout=180)


def grpc_requests(pod: dict[str, Any], key: str) -> int:
    """Triton's own count of the requests the kept gRPC channels sent this pod (the `add` model's);
    `key`: the server's control key, which statistics answer to."""
    address = f"{pod['status']['podIP']}:8001"
    client = grpcclient.InferenceServerClient(address)
    try:
        stats = client.get_inference_statistics("add", headers={GRPC_CONTROL_METADATA: key}, as_json=True)
        return sum(int(s["inference_stats"]["success"].get("count", 0)) for s in stats.get("model_stats", []))
    finally:
        client.close()


async def start_serving(mini: MiniCluster, server: dict[str, Any]) -> tuple[str, str]:
    for obj in (server, FILES, MODEL, http_model(), *ticker_model()):
        await mini.cluster.create(copy.deepcopy(obj))
    await settled(mini, server["spec"]["replicas"], "the first pods serving")
    return await mini.address("triton", "grpc"), await mini.address("triton", "http")


async def every_kind_sending(mini: MiniCluster, kinds: dict[str, list[Client]]) -> None:
    """Every request client answered 20 times (streams take seconds each: they are counted at the end)."""
    await mini.cluster.wait(
        "every client answered",
        lambda: all(count > 20 for kind, count in sent(kinds).items() if kind != STREAM),
        timeout=60,
    )


async def test_no_request_fails_through_scaling_a_rollout_and_a_reload(tmp_path: Path) -> None:
    async with operated_cluster(tmp_path, PROPAGATION_SECONDS) as mini:
        grpc_address, http_address = await start_serving(mini, drained_server())
        steps: dict[str, dict[str, int]] = {}
        streams: dict[str, int] = {}  # whole streams in the steps where pods leave
        terminated = 0
        with clients(grpc_address, http_address) as kinds:
            await every_kind_sending(mini, kinds)

            # Scale 2 -> 4 through the scale subresource; the kept gRPC channels reach the new pods.
            before, counted = {pod["metadata"]["name"] for pod in serving_pods(mini)}, failures(kinds)
            steps["start"] = counted
            await scale(mini, 4)
            await settled(mini, 4, "four pods serving")
            ready = time.monotonic()
            new = [pod for pod in serving_pods(mini) if pod["metadata"]["name"] not in before]
            key = mini.cluster.control_key("triton") or ""
            start = {pod["metadata"]["name"]: grpc_requests(pod, key) for pod in new}
            await mini.cluster.wait(
                "gRPC traffic on a new pod",
                lambda: any(grpc_requests(pod, key) > start[pod["metadata"]["name"]] for pod in new),
                timeout=60,
            )
            first_reached = time.monotonic() - ready
            await mini.cluster.wait(
                "gRPC traffic on every new pod",
                lambda: all(grpc_requests(pod, key) > start[pod["metadata"]["name"]] for pod in new),
                timeout=60,
            )
            reached = time.monotonic() - ready
            steps["scale 2->4"] = {k: v - counted[k] for k, v in failures(kinds).items()}

            # Scale 4 -> 2: two pods drain.
            counted, streamed = failures(kinds), sent(kinds)[STREAM]
            await scale(mini, 2)
            await settled(mini, 2, "two pods serving")
            terminated += 2
            steps["scale 4->2"] = {k: v - counted[k] for k, v in failures(kinds).items()}
            streams["scale 4->2"] = sent(kinds)[STREAM] - streamed

            # A server flag: every pod rolls (maxSurge 1, maxUnavailable 0).
            counted, old, streamed = (
                failures(kinds),
                {pod["metadata"]["name"] for pod in mini.pods_of("triton")},
                sent(kinds)[STREAM],
            )
            await mini.cluster.patch("TritonServer", "triton", {"spec": {"modelLoadThreadCount": 2}})
            await mini.cluster.wait(
                "every pod replaced",
                lambda: not old & {pod["metadata"]["name"] for pod in mini.pods_of("triton")},
                timeout=240,
            )
            await settled(mini, 2, "two new pods serving")
            terminated += 2
            steps["rollout"] = {k: v - counted[k] for k, v in failures(kinds).items()}
            streams["rollout"] = sent(kinds)[STREAM] - streamed

            # A model edit: reloaded in place on every pod.
            counted, revision = failures(kinds), mini.cluster.get("TritonModel", "add")["status"]["configHash"]
            await mini.cluster.patch(
                "TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": 300}}}}
            )
            await mini.cluster.wait(
                "the edit on both pods", lambda: model_ready_at(mini.cluster, revision_not=revision), timeout=60
            )
            steps["reload"] = {k: v - counted[k] for k, v in failures(kinds).items()}
            total = sent(kinds)
        print(
            f"sent {total}; whole streams {streams}; failures per step {steps}; the kept gRPC channels reached a "
            f"new pod {first_reached:.1f}s and both {reached:.1f}s after they were ready"
        )
        every = {kind: [f for client in group for f in client.failures] for kind, group in kinds.items()}
        assert every["grpc"] == [] and every[STREAM] == [] and every["http-new"] == [], every
        # Pods left in these steps, each longer than a preStop (11 s): streams ended whole within them.
        assert streams["scale 4->2"] > 0 and streams["rollout"] > 0, streams
        # A keep-alive connection is cut at a pod's exit timeout: at most its request in flight fails, once per pod
        # that held it.
        assert len(every["http-keep-alive"]) <= terminated, every["http-keep-alive"]
        assert all(
            "closed" in failure.lower() or "reset" in failure.lower() or "disconnected" in failure.lower()
            for failure in every["http-keep-alive"]
        ), every
        # Each recycle (one max connection age and its grace) re-picks a pod among four, two of them new,
        # through the proxy's turn-taking shared with every other connection: as good as a coin flip per
        # recycle. The bounds leave a flake chance under 1 in 1,000; the measured times are printed.
        age = AGE_MS * 1.1 / 1000 + 1  # the jittered age and a second to reconnect
        assert first_reached <= 2 * age + 3, first_reached
        assert reached <= 6 * age + 5, reached


async def test_without_a_pre_stop_delay_a_scale_down_fails_requests(tmp_path: Path) -> None:
    """The measurement sees what the delay prevents: Triton fails every gRPC request from SIGTERM on,
    and new HTTP connections are refused, while the Service still sends to the pod."""
    async with operated_cluster(tmp_path, 2 * PROPAGATION_SECONDS) as mini:  # a wider window to fail in
        grpc_address, http_address = await start_serving(mini, drained_server(pre_stop_seconds=0))
        with clients(grpc_address, http_address) as kinds:
            await every_kind_sending(mini, kinds)
            await scale(mini, 1)
            await settled(mini, 1, "one pod serving")
        counted = failures(kinds)
        print(f"failures with no preStop delay: {counted}")
        assert counted["grpc"] + counted["http-new"] > 0, counted
