"""The mini cluster itself (tests/support/minicluster): its Deployment controller, kubelet and Service
proxy keep the rules they stand for, and a rule broken on purpose shows in what the tests measure.

Most pods here run the fake container (tests/support/minicluster/fake_container.py: an HTTP server
answering its pod's name, up in a fraction of a second); those marked `triton` run tritonservers.
Every test waits out real grace periods and propagation delays: `slow` all of them.
"""

from __future__ import annotations

import asyncio
import copy
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.minicluster import MiniCluster, fake_container, kubelet, mini_cluster, operated_cluster
from tests.support.minicluster.client import PODS, STRATEGIC_MERGE_PATCH
from tests.support.minicluster.controller import HASH_LABEL, NODE, is_ready, is_terminating
from tests.support.minicluster.kubelet import processes_in_groups
from tests.support.resources import FILES, MODEL, SERVER
from tests.support.serving import infer, model_ready_at
from triton_operator.cli.stats_command import answers_http

pytestmark = pytest.mark.slow

GATE = "example.com/gate"


def deployment(
    name: str,
    replicas: int,
    container: dict[str, Any],
    grace: int = 30,
    gates: tuple[str, ...] = (),
    surge: int = 1,
    unavailable: int = 0,
) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": grace}
    if gates:
        pod["readinessGates"] = [{"conditionType": gate} for gate in gates]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod},
        },
    }


def service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }


def fake(*args: str, pre_stop: dict[str, Any] | None = None) -> dict[str, Any]:
    container = fake_container.container(*args)
    if pre_stop is not None:
        container["lifecycle"] = {"preStop": pre_stop}
    return container


TRITON = {
    "name": "tritonserver",
    "image": "tritonserver",
    "command": ["tritonserver"],
    "args": [
        "--model-repository=/models",
        "--model-control-mode=explicit",
        "--strict-readiness=false",
        "--exit-timeout-secs=5",
    ],
    "ports": [
        {"name": name, "containerPort": port, "protocol": "TCP"}
        for name, port in (("http", 8000), ("grpc", 8001), ("metrics", 8002))
    ],
    "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": "http"}},
    "volumeMounts": [
        {"name": "models", "mountPath": "/models"},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ],
}


async def ask(address: str) -> str:
    """The name of the pod a new connection through `address` reached; "" if it closed unanswered."""
    host, port = address.split(":")
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 5)
        writer.write(b"GET /name HTTP/1.0\r\n\r\n")
        response = await asyncio.wait_for(reader.read(), 5)
        writer.close()
    except OSError:
        return ""
    return response.partition(b"\r\n\r\n")[2].decode()


def deleted(mini: MiniCluster, pod: str) -> bool:
    """Whether the kubelet is done with the pod: stopped, and deleted from the API."""
    return any(event.what == "deleted" for event in mini.kubelet.pod_log(pod))


def in_service(mini: MiniCluster, name: str) -> list[str]:
    return [pod["metadata"]["name"] for pod in mini.pods_of(name) if is_ready(pod) and not is_terminating(pod)]


def routed(mini: MiniCluster, service: str) -> tuple[str, ...]:
    """The pods the Service's proxy sends new connections to now."""
    changes = [change for change in mini.services.changes if change.service == service]
    return changes[-1].pods if changes else ()


async def serving(mini: MiniCluster, name: str, count: int) -> list[str]:
    """Until `count` pods of the Deployment are in service and the Service of that name routes to them."""
    pods = await mini.cluster.wait(
        f"{count} pods of {name} in service", lambda: (pods := in_service(mini, name)) and len(pods) == count and pods
    )
    await mini.cluster.wait(f"the Service routing to {pods}", lambda: sorted(routed(mini, name)) == sorted(pods))
    return pods


async def set_gate(mini: MiniCluster, pod: str, status: str) -> None:
    """The readinessGate condition, written as the operator writes its own."""
    body = {"status": {"conditions": [{"type": GATE, "status": status}]}}
    await mini.cluster.request("PATCH", f"{PODS}/{pod}/status", body, STRATEGIC_MERGE_PATCH)


@pytest.mark.triton
async def test_scaling_one_two_one_starts_and_stops_tritonservers(tmp_path: Path) -> None:
    async with mini_cluster(tmp_path) as mini:
        await mini.cluster.create(deployment("triton", 1, TRITON, grace=20))
        await mini.cluster.wait("one pod in service", lambda: len(in_service(mini, "triton")) == 1)
        await mini.cluster.patch("Deployment", "triton", {"spec": {"replicas": 2}})
        both = await mini.cluster.wait(
            "two pods in service", lambda: (pods := in_service(mini, "triton")) and len(pods) == 2 and pods
        )
        groups = {runner.name: runner.process.pid for runner in list(mini.kubelet.pods.values()) if runner.process}
        assert all(processes_in_groups({groups[name]}) for name in both)
        addresses = {pod["metadata"]["name"]: pod["status"]["podIP"] for pod in mini.pods_of("triton")}
        assert len(set(addresses.values())) == 2
        for address in addresses.values():
            assert await asyncio.to_thread(answers_http, f"{address}:8000")

        (replica_set,) = mini.cluster.all("ReplicaSet")
        pod_hash = replica_set["metadata"]["labels"][HASH_LABEL]
        assert replica_set["metadata"]["name"] == f"triton-{pod_hash}"
        assert [ref["name"] for ref in replica_set["metadata"]["ownerReferences"]] == ["triton"]
        for pod in mini.pods_of("triton"):
            assert pod["metadata"]["name"].startswith(f"triton-{pod_hash}-") and pod["metadata"]["labels"] == {
                "app": "triton",
                HASH_LABEL: pod_hash,
            }
            assert pod["metadata"]["ownerReferences"][0]["uid"] == replica_set["metadata"]["uid"]

        await mini.cluster.patch("Deployment", "triton", {"spec": {"replicas": 1}})
        (removed,) = await mini.cluster.wait(
            "one of them deleted", lambda: [name for name in both if deleted(mini, name)]
        )
        (kept,) = set(both) - {removed}
        assert [pod["metadata"]["name"] for pod in mini.pods_of("triton")] == [kept]
        log = mini.kubelet.pod_log(removed)
        assert [event.what for event in log] == [
            "started",
            "terminating",
            "SIGTERM",
            "exited",
            "deleted",
        ]  # Triton ends on SIGTERM, within the grace
        assert log[3].detail == "0"  # its exit status
        assert processes_in_groups({groups[removed]}) == []  # the stubs with it
        assert not await asyncio.to_thread(answers_http, f"{addresses[removed]}:8000")
        assert await asyncio.to_thread(answers_http, f"{addresses[kept]}:8000")

        status = await mini.cluster.wait(
            "the Deployment's status",
            lambda: (d := mini.cluster.get("Deployment", "triton")) and d["status"].get("replicas") == 1 and d,
        )
        assert status["status"] == {
            "observedGeneration": status["metadata"]["generation"],
            "replicas": 1,
            "updatedReplicas": 1,
            "readyReplicas": 1,
            "availableReplicas": 1,
        }


async def test_a_template_change_rolls_the_pods_one_at_a_time_keeping_every_replica_in_service(tmp_path: Path) -> None:
    async with mini_cluster(tmp_path) as mini:
        await mini.cluster.create(deployment("web", 3, fake()))
        await mini.cluster.create(service("web"))
        old = await serving(mini, "web", 3)
        rolled_at = time.monotonic()
        await mini.cluster.patch(
            "Deployment", "web", {"spec": {"template": {"metadata": {"annotations": {"edited": "yes"}}}}}
        )
        new = await mini.cluster.wait(
            "three new pods in service",
            lambda: (pods := in_service(mini, "web")) and len(pods) == 3 and not set(pods) & set(old) and pods,
        )
        await mini.cluster.wait("the old pods gone", lambda: len(mini.pods_of("web")) == 3)

        actions = [
            event.what
            for event in mini.controller.events
            if event.at > rolled_at and event.what in ("create-pod", "delete-pod")
        ]
        assert actions == ["create-pod", "delete-pod"] * 3, actions
        counts = [(active, serving) for at, active, serving in mini.controller.pod_counts("web") if at > rolled_at]
        assert min(serving for _, serving in counts) >= 3, counts  # maxUnavailable 0
        assert max(active for active, _ in counts) <= 4, counts  # maxSurge 1
        assert {pod["metadata"]["name"] for pod in mini.pods_of("web")} == set(new)
        assert sorted(await serving(mini, "web", 3)) == sorted(new)
        address = await mini.address("web", "http")
        assert sorted([await ask(address) for _ in range(6)]) == sorted(new * 2)  # round robin

        await mini.cluster.wait(
            "the Deployment's status", lambda: mini.cluster.get("Deployment", "web")["status"]["replicas"] == 3
        )
        deployment_status = mini.cluster.get("Deployment", "web")["status"]
        assert deployment_status["updatedReplicas"] == deployment_status["readyReplicas"] == 3
        replica_sets = {
            rs["metadata"]["labels"][HASH_LABEL]: rs["spec"]["replicas"] for rs in mini.cluster.all("ReplicaSet")
        }
        assert sorted(replica_sets.values()) == [0, 3]


async def test_max_unavailable_one_lets_the_pods_in_service_dip_and_the_log_shows_it(tmp_path: Path) -> None:
    """The rollout above, with the rule it relies on broken (maxSurge 0, maxUnavailable 1): the same
    measurement sees fewer pods in service than replicas."""
    async with mini_cluster(tmp_path) as mini:
        await mini.cluster.create(deployment("web", 3, fake(), surge=0, unavailable=1))
        old = await mini.cluster.wait(
            "three pods in service", lambda: (pods := in_service(mini, "web")) and len(pods) == 3 and pods
        )
        rolled_at = time.monotonic()
        await mini.cluster.patch(
            "Deployment", "web", {"spec": {"template": {"metadata": {"annotations": {"edited": "yes"}}}}}
        )
        await mini.cluster.wait(
            "three new pods in service",
            lambda: (pods := in_service(mini, "web")) and len(pods) == 3 and not set(pods) & set(old),
        )
        counts = [(active, serving) for at, active, serving in mini.controller.pod_counts("web") if at > rolled_at]
        assert min(serving for _, serving in counts) == 2, counts
        assert max(active for active, _ in counts) == 3, counts


async def test_a_pod_whose_readiness_gate_is_false_is_not_ready_and_gets_no_connection(tmp_path: Path) -> None:
    async with mini_cluster(tmp_path) as mini:
        await mini.cluster.create(deployment("web", 2, fake(), gates=(GATE,)))
        await mini.cluster.create(service("web"))
        address = await mini.address("web", "http")

        def containers_ready() -> list[str]:
            return [
                pod["metadata"]["name"]
                for pod in mini.pods_of("web")
                if any(
                    c["type"] == "ContainersReady" and c["status"] == "True"
                    for c in pod.get("status", {}).get("conditions", [])
                )
            ]

        first, second = await mini.cluster.wait(
            "both containers ready", lambda: (names := containers_ready()) and len(names) == 2 and names
        )
        assert in_service(mini, "web") == []
        assert await asyncio.gather(*(ask(address) for _ in range(4))) == [""] * 4

        await set_gate(mini, first, "True")
        assert await serving(mini, "web", 1) == [first]
        assert await asyncio.gather(*(ask(address) for _ in range(4))) == [first] * 4

        await set_gate(mini, second, "True")
        await serving(mini, "web", 2)
        await set_gate(mini, first, "False")
        assert await serving(mini, "web", 1) == [second]
        assert await asyncio.gather(*(ask(address) for _ in range(4))) == [second] * 4
        assert [
            c["status"]
            for c in mini.cluster.get("Pod", first)["status"]["conditions"]
            if c["type"] in ("ContainersReady", "Ready")
        ] == ["True", "False"]


@pytest.mark.parametrize(
    "pre_stop",
    [
        {"sleep": {"seconds": 1}},
        {"exec": {"command": ["sleep", "1"]}},
        {"exec": {"command": ["/bin/sh", "-c", "sleep 1"]}},
    ],
    ids=["sleep-action", "exec-sleep", "exec-shell"],
)
async def test_deletion_runs_pre_stop_then_sigterm_then_sigkill_at_the_grace(
    tmp_path: Path, pre_stop: dict[str, Any]
) -> None:
    """A container ignoring SIGTERM (the fake one's --ignore-sigterm) is killed at the grace period,
    counted from the deletion, preStop included; until then the Pod stays, terminating. (A Pod of its
    own, bound to the node: a ReplicaSet would replace it.)"""
    async with mini_cluster(tmp_path) as mini:
        pod = "lonely"
        container = fake("--ignore-sigterm", pre_stop=pre_stop)
        await mini.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod},
                "spec": {"nodeName": NODE, "containers": [container], "terminationGracePeriodSeconds": 3},
            }
        )
        await mini.cluster.wait("the pod ready", lambda: is_ready(mini.cluster.get("Pod", pod)))
        deleted_at = time.monotonic()
        await mini.cluster.delete("Pod", pod)
        terminating = mini.cluster.get("Pod", pod)
        assert (
            terminating["metadata"]["deletionGracePeriodSeconds"] == 3 and terminating["metadata"]["deletionTimestamp"]
        )
        await mini.cluster.wait("the pod deleted", lambda: deleted(mini, pod), timeout=20)
        assert mini.cluster.get("Pod", pod) is None

        log = {event.what: event for event in mini.kubelet.pod_log(pod)}
        assert list(log) == [
            "started",
            "terminating",
            "preStop",
            "preStop-done",
            "SIGTERM",
            "SIGKILL",
            "exited",
            "deleted",
        ]
        assert log["preStop-done"].at - log["preStop"].at >= 1
        assert log["exited"].detail == "-9"
        assert 3 <= log["SIGKILL"].at - deleted_at <= 5
        container_log = (tmp_path / "default" / pod / "fake.log").read_text().split()
        assert container_log[0] == "SIGTERM" and log["SIGTERM"].at <= float(container_log[1]) <= log["SIGKILL"].at


async def test_the_service_sends_new_connections_to_a_ready_pod_only_after_the_propagation_delay(
    tmp_path: Path,
) -> None:
    async with mini_cluster(tmp_path, propagation_seconds=1.0) as mini:
        await mini.cluster.create(deployment("web", 1, fake()))
        await mini.cluster.create(service("web"))
        (first,) = await serving(mini, "web", 1)
        address = await mini.address("web", "http")
        host, port = address.split(":")
        kept_reader, kept_writer = await asyncio.open_connection(host, int(port))  # opened now, used later

        scaled_at = time.monotonic()
        await mini.cluster.patch("Deployment", "web", {"spec": {"replicas": 2}})
        second = None
        while second is None:  # new connections, until one reaches the new pod
            answer = await ask(address)
            assert answer, "a connection went unanswered"
            second = answer if answer != first else None
            assert time.monotonic() - scaled_at < 30, "the new pod got no connection"

        change = next(c for c in mini.services.changes if c.pods == tuple(sorted((first, second))))
        assert change.applied - change.seen >= 0.999  # the event loop's clock resolution
        ready_seen = [c.at for c in mini.services.connections if c.pod == second]
        assert min(ready_seen) >= change.applied
        assert all(c.pod == first for c in mini.services.connections if scaled_at < c.at < change.applied)

        kept_writer.write(b"GET /name HTTP/1.0\r\n\r\n")  # the connection opened before stays on its pod
        assert (await kept_reader.read()).partition(b"\r\n\r\n")[2].decode() == first
        kept_writer.close()


@pytest.mark.parametrize(
    ("propagation_seconds", "pre_stop_seconds", "failures_expected"),
    [(0.2, 2, False), (2.0, 0, True)],
    ids=["propagation-within-preStop", "propagation-longer-than-preStop"],
)
async def test_a_deleted_pod_fails_new_connections_only_when_propagation_outlasts_pre_stop(
    tmp_path: Path, propagation_seconds: float, pre_stop_seconds: int, failures_expected: bool
) -> None:
    """Clients opening a connection per request while a pod is deleted: with a preStop longer than the
    endpoints' propagation none fails; with the rule broken (propagation longer), some do."""
    async with mini_cluster(tmp_path, propagation_seconds=propagation_seconds) as mini:
        await mini.cluster.create(
            deployment("web", 2, fake(pre_stop={"sleep": {"seconds": pre_stop_seconds}}), grace=10)
        )
        await mini.cluster.create(service("web"))
        doomed, _ = await serving(mini, "web", 2)
        address = await mini.address("web", "http")
        answers: list[str] = []
        stop = asyncio.Event()

        async def client() -> None:
            while not stop.is_set():
                answers.append(await ask(address))
                await asyncio.sleep(0.01)

        clients = asyncio.create_task(client())
        await mini.cluster.wait("some answers first", lambda: len(answers) >= 10)
        await mini.cluster.delete("Pod", doomed)
        await mini.cluster.wait("the pod gone", lambda: mini.cluster.get("Pod", doomed) is None, timeout=30)
        await mini.cluster.wait("the Service without it", lambda: doomed not in routed(mini, "web"))
        stop.set()
        await clients
        failed = answers.count("")
        assert (failed > 0) == failures_expected, f"{failed} of {len(answers)} failed"
        assert doomed in answers


async def test_a_port_taken_on_the_pods_address_fails_the_pod_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        address, port = squatter.getsockname()
        squatter.listen()
        container = fake()
        container["ports"][0]["containerPort"] = port
        monkeypatch.setattr(kubelet, "next_pod_address", lambda: address)
        async with mini_cluster(tmp_path) as mini:
            await mini.cluster.create(deployment("web", 1, container))
            failure = await mini.cluster.wait("the pod failed", lambda: mini.kubelet.failures)
            assert f"port {port} (http) is taken on {address}, the pod's own address" in failure[0]
            (pod,) = mini.pods_of("web")
            await mini.cluster.wait(
                "its status saying so",
                lambda: "taken" in str(mini.cluster.get("Pod", pod["metadata"]["name"]).get("status")),
            )
            mini.kubelet.failures.clear()


@pytest.mark.triton
async def test_a_triton_server_of_two_replicas_serves_its_model_through_its_service(tmp_path: Path) -> None:
    async with operated_cluster(tmp_path) as mini:
        for obj in (SERVER, FILES, MODEL):
            await mini.cluster.create(copy.deepcopy(obj))
        # Adding the model rolls the pods (their /dev/shm and memory come from the models), maybe twice when a
        # first pass rendered the server alone: the old ReplicaSet's last pod is deleted only after the new
        # pods are ready, then drains for its preStop (136 s by default), out of the Service meanwhile.

        def live_pods() -> list[str]:
            return sorted(
                pod["metadata"]["name"]
                for pod in mini.pods_of("triton")
                if not pod["metadata"].get("deletionTimestamp")
            )

        def ready_on_the_live_pods() -> dict[str, Any] | None:
            status = model_ready_at(mini.cluster)
            return (
                status if status and sorted(state["pod"] for state in status["replicaStates"]) == live_pods() else None
            )

        await mini.cluster.wait("the model ready on both pods, the roll finished", ready_on_the_live_pods, timeout=180)
        pods = live_pods()
        assert [(mini.cluster.pod_condition(name) or {}).get("status") for name in pods] == ["True", "True"]
        await mini.cluster.wait("the Service routing to both", lambda: sorted(routed(mini, "triton")) == sorted(pods))

        grpc = await mini.address("triton", "grpc")
        answers = [await asyncio.to_thread(infer, grpc) for _ in range(4)]  # a new channel, so a new connection, each
        assert answers == [[2.0] * 4] * 4
        assert sorted({c.pod for c in mini.services.connections if c.service == "triton"}) == sorted(pods)
        assert mini.cluster.get("Deployment", "triton")["status"]["readyReplicas"] == 2
