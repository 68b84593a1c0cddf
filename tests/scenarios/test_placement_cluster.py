"""Placement on the mini cluster, with real tritonservers as the pods: models with a serverSelector fill
servers with room, wait Unschedulable until one has room, stay put across an operator restart, and
move off a deleted server without a failed request for a client that follows status.placement."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.minicluster import MiniCluster, mini_cluster
from tests.support.operator import running_operator
from tests.support.resources import FILES, MODEL, SERVER
from tests.support.serving import RequestLoop, infer

pytestmark = [pytest.mark.triton, pytest.mark.slow]

POOL = {"pool": "cpu"}
SETTINGS = {"move_drain_seconds": 2, "move_hold_seconds": 600}


def pool_server(name: str, capacity: str) -> dict[str, Any]:
    server = copy.deepcopy(SERVER)
    server["metadata"] = {"name": name, "labels": dict(POOL)}
    server["spec"].update(replicas=1, capacity={"memory": capacity}, drain={"preStopSeconds": 1})
    return server


def placed_model(index: int) -> dict[str, Any]:
    model = copy.deepcopy(MODEL)
    model["metadata"]["name"] = f"m{index}"
    spec = model["spec"]
    del spec["serverRef"]
    spec.update(serverSelector={"matchLabels": dict(POOL)}, memory={"cpu": "40Mi"}, modelName=f"add_{index}")
    return model


def placement(mini: MiniCluster, name: str) -> dict[str, Any]:
    return ((mini.cluster.get("TritonModel", name) or {}).get("status") or {}).get("placement") or {}


def condition(mini: MiniCluster, name: str, type_: str) -> dict[str, Any]:
    return mini.cluster.condition("TritonModel", name, type_) or {}


def placed_and_ready(mini: MiniCluster, names: list[str]) -> dict[str, str] | None:
    """Where each model serves, once each is placed and Ready there."""
    where = {name: placement(mini, name).get("server") for name in names}
    settled = all(where.values()) and all(not placement(mini, n).get("target") for n in names)
    return where if settled and all(condition(mini, n, "Ready").get("status") == "True" for n in names) else None  # type: ignore[return-value]


class Follower(RequestLoop):
    """Clients of the models that read status.placement before every request and send it to that server's
    Service, as a client following the model's placement does; every failure is counted, and
    `answered_by` counts the answers by "model@server"."""

    def __init__(self, mini: MiniCluster, addresses: dict[str, str], models: list[str]):
        self.mini, self.addresses = mini, addresses
        super().__init__(models)

    def _run(self, name: str) -> None:
        index = name.removeprefix("m")
        while not self.stop.is_set():
            server = placement(self.mini, name).get("server", "")
            try:
                assert infer(self.addresses[server], f"add_{index}") == [2.0] * 4
                self.answered_by[f"{name}@{server}"] += 1
            except Exception as error:  # every failure is what the test counts
                self.failures.append(f"{name} on {server}: {error}")


async def test_selector_models_fill_servers_wait_for_room_stay_put_and_move_off_a_deleted_server(
    tmp_path: Path,
) -> None:
    names = [f"m{index}" for index in range(5)]
    async with mini_cluster(tmp_path) as mini:
        cluster = mini.cluster
        async with running_operator(cluster, **SETTINGS):
            await cluster.create(copy.deepcopy(FILES))
            for name in ("a", "b"):
                await cluster.create(pool_server(name, "100Mi"))
            for index in range(5):
                await cluster.create(placed_model(index))
            # 100Mi each takes two models of 40Mi: four placed, the fifth waits with the figures
            where = await cluster.wait(
                "four models placed and ready", lambda: placed_and_ready(mini, names[:4]), timeout=180
            )
            assert Counter(where.values()) == {"a": 2, "b": 2}
            waiting = await cluster.wait(
                "m4 unschedulable",
                lambda: (c := condition(mini, "m4", "Placed")).get("reason") == "Unschedulable" and c,
            )
            assert waiting["status"] == "False"
            assert waiting["message"] == "0/2 servers have room for 40Mi (Declared): a (20Mi free), b (20Mi free)"
            assert condition(mini, "m4", "Ready")["reason"] == "Unschedulable" and placement(mini, "m4") == {
                "reason": "Unschedulable",
                "message": waiting["message"],
            }
            assert (
                cluster.get("Deployment", "a")["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"][
                    "memory"
                ]
                == cluster.get("Deployment", "b")["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"][
                    "memory"
                ]
            )

            await cluster.create(pool_server("c", "200Mi"))  # room appears: m4 is placed there
            where = await cluster.wait("all five placed and ready", lambda: placed_and_ready(mini, names), timeout=180)
            assert where["m4"] == "c" and condition(mini, "m4", "Placed")["status"] == "True"
            placed_mib = Counter({server: 40 * count for server, count in Counter(where.values()).items()})
            assert (
                placed_mib["a"] <= 100 and placed_mib["b"] <= 100 and placed_mib["c"] <= 200
            )  # none over its capacity
            for server in ("a", "b", "c"):
                assert (
                    "triton-operator.io/placed-models" in cluster.get("TritonServer", server)["metadata"]["finalizers"]
                )
            statuses = {name: cluster.get("TritonModel", name)["status"]["placement"] for name in names}

        async with running_operator(cluster, **SETTINGS) as operator:  # restarted: it reads the placements back
            await cluster.wait("a placement pass after the restart", lambda: operator.placer.passes >= 1)
            await cluster.wait(
                "the workers' first passes",
                lambda: (
                    len(operator.workers.running) == 3 and all(w.finished for w, _ in operator.workers.running.values())
                ),
            )
            assert {name: cluster.get("TritonModel", name)["status"]["placement"] for name in names} == statuses

            addresses = {server: await mini.address(server, "grpc") for server in ("a", "b", "c")}
            on_b = sorted(name for name, server in where.items() if server == "b")
            with Follower(mini, addresses, on_b) as clients:
                await cluster.wait("answered on b", lambda: all(clients.answered_by[f"{name}@b"] for name in on_b))
                await cluster.delete("TritonServer", "b")  # c has room for both: they move there, make before break
                await cluster.wait(
                    "b's models moved to c and b gone",
                    lambda: (
                        all(
                            placement(mini, n).get("server") == "c" and not placement(mini, n).get("previous")
                            for n in on_b
                        )
                        and cluster.get("TritonServer", "b") is None
                    ),
                    timeout=180,
                )
                await cluster.wait("answered on c", lambda: all(clients.answered_by[f"{name}@c"] for name in on_b))
            assert clients.failures == [] and all(clients.answered_by[f"{name}@b"] for name in on_b)
            await cluster.wait(
                "b's pods gone with it",
                lambda: "deployments/b" in mini.garbage.collected and not mini.pods_of("b"),
                timeout=60,
            )
