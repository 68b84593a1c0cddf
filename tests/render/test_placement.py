"""Placement by memory (render/placement.py), table by table: which server each model takes, that no server
is given more than it has, that a placed model stays, and what an unschedulable model is told."""

from __future__ import annotations

import random
from typing import Any

import pytest

from triton_operator.api.resources import TritonModel
from triton_operator.api.server import TritonServerSpec
from triton_operator.api.types import GiB, LabelSelector, MiB
from triton_operator.render.placement import (
    TRITON_BASELINE_BYTES,
    MemorySource,
    ModelDemand,
    ServerRoom,
    counted_gpu_bytes,
    place,
    readable_bytes,
    server_capacity,
)

POOL_A = LabelSelector(match_labels={"pool": "a"})


def _servers(
    *rooms: tuple[str, int | None], labels: dict[str, str] | None = None, replicas: int = 1
) -> list[ServerRoom]:
    return [
        ServerRoom("ns", name, labels if labels is not None else {"pool": "a"}, replicas, room) for name, room in rooms
    ]


def _models(*sizes: int, selector: LabelSelector = POOL_A, **fields: Any) -> list[ModelDemand]:
    return [
        ModelDemand("ns", f"m{index}", size, MemorySource.DECLARED, selector=selector, **fields)
        for index, size in enumerate(sizes)
    ]


def _where(servers: list[ServerRoom], models: list[ModelDemand]) -> dict[str, str | None]:
    return {placed.model.name: placed.server for placed in place(servers, models).models}


# (id, servers (name, room), model sizes in order given, where each goes)
TABLE: list[tuple[str, list[tuple[str, int | None]], list[int], dict[str, str | None]]] = [
    ("best fit: the tightest server that holds it", [("big", 1000), ("small", 300)], [250], {"m0": "small"}),
    (
        "largest first, then the rest fill the gaps",
        [("a", 1000), ("b", 600)],
        [300, 600, 400, 300],
        {"m1": "b", "m2": "a", "m0": "a", "m3": "a"},
    ),
    ("exactly full is a fit", [("a", 500)], [200, 300], {"m0": "a", "m1": "a"}),
    ("never over-committed: what does not fit is unschedulable", [("a", 500)], [300, 300], {"m0": "a", "m1": None}),
    ("equal room: the first by name", [("b", 500), ("a", 500)], [100], {"m0": "a"}),
    (
        "unknown capacity only where no known one holds it",
        [("open", None), ("a", 300)],
        [200, 200],
        {"m0": "a", "m1": "open"},
    ),
    (
        "unknown capacities: the least loaded",
        [("x", None), ("y", None)],
        [300, 200, 100],
        {"m0": "x", "m1": "y", "m2": "y"},
    ),
    ("nothing matches", [], [100], {"m0": None}),
]


@pytest.mark.parametrize(("rooms", "sizes", "expected"), [row[1:] for row in TABLE], ids=[row[0] for row in TABLE])
def test_best_fit_decreasing(
    rooms: list[tuple[str, int | None]], sizes: list[int], expected: dict[str, str | None]
) -> None:
    assert _where(_servers(*rooms), _models(*sizes)) == expected


def test_only_servers_the_selector_matches_in_the_models_namespace() -> None:
    servers = [
        ServerRoom("ns", "gpu", {"pool": "gpu"}, 1, 10 * GiB),
        ServerRoom("other", "cpu-elsewhere", {"pool": "cpu"}, 1, 10 * GiB),
        ServerRoom("ns", "cpu-small", {"pool": "cpu", "tier": "b"}, 1, 1 * GiB),
        ServerRoom("ns", "cpu-legacy", {"pool": "cpu", "legacy": "yes"}, 1, 1 * GiB),
    ]
    selector = LabelSelector.model_validate(
        {
            "matchLabels": {"pool": "cpu"},
            "matchExpressions": [
                {"key": "tier", "operator": "NotIn", "values": ["a"]},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        }
    )
    assert _where(servers, _models(512 * MiB, 512 * MiB, selector=selector)) == {"m0": "cpu-small", "m1": "cpu-small"}


def test_a_server_scaled_to_zero_holds_nothing() -> None:
    servers = _servers(("zero", 10 * GiB), replicas=0) + _servers(("one", 1 * GiB))
    placement = place(servers, _models(2 * GiB, 512 * MiB, current="zero"))
    assert [placed.server for placed in placement.models] == [None, "one"]
    assert (
        placement.models[0].message
        == "0/2 servers have room for 2Gi (Declared): one (512Mi free), zero (scaled to zero)"
    )


def test_a_placed_model_stays_while_it_fits() -> None:
    servers = _servers(("tight", 600), ("roomy", 2000))
    fresh = _where(servers, _models(500))
    assert fresh == {"m0": "tight"}
    assert _where(servers, _models(500, current="roomy")) == {"m0": "roomy"}
    # Grown past its server's room, it goes where it fits.
    assert _where(_servers(("tight", 600), ("roomy", 400)), _models(500, current="roomy")) == {"m0": "tight"}
    # A server that no longer matches the selector lets it go.
    moved = [ServerRoom("ns", "roomy", {"pool": "b"}, 1, 2000), ServerRoom("ns", "tight", {"pool": "a"}, 1, 600)]
    assert _where(moved, _models(500, current="roomy")) == {"m0": "tight"}


def test_stable_models_keep_their_place_before_new_ones_are_placed() -> None:
    servers = _servers(("a", 1000), ("b", 1000))
    models = [*_models(400, current="b"), ModelDemand("ns", "new", 900, MemorySource.DEFAULT, selector=POOL_A)]
    assert _where(servers, models) == {"m0": "b", "new": "a"}


def test_named_servers_count_their_models_first_and_are_never_moved() -> None:
    servers = _servers(("a", 1000), ("b", 1000))
    bound = ModelDemand("ns", "pinned", 1200, MemorySource.DECLARED, server="a")
    placement = place(servers, [bound, *_models(500)])
    assert [placed.server for placed in placement.models] == ["a", "b"]
    assert [(load.room.name, load.placed_bytes, load.free_bytes) for load in placement.servers] == [
        ("a", 1200, -200),
        ("b", 500, 500),
    ]


def test_gpu_memory_is_counted_where_the_server_gives_it() -> None:
    servers = [
        ServerRoom("ns", "gpu-small", {"pool": "a"}, 1, 10 * GiB, 8 * GiB),
        ServerRoom("ns", "gpu-big", {"pool": "a"}, 1, 20 * GiB, 40 * GiB),
    ]
    placement = place(servers, _models(1 * GiB, 1 * GiB, gpu_memory_bytes=6 * GiB))
    assert [placed.server for placed in placement.models] == ["gpu-small", "gpu-big"]
    full = place(servers[:1], _models(1 * GiB, 1 * GiB, gpu_memory_bytes=6 * GiB))
    assert (
        full.models[1].message
        == "0/1 servers have room for 1Gi (Declared) and 6Gi of GPU memory: gpu-small (9Gi free, 2Gi GPU free)"
    )


def test_unschedulable_names_each_candidates_room_the_roomiest_first() -> None:
    servers = _servers(*((f"s{index:02}", index * 100 * MiB) for index in range(1, 13)))
    placement = place(servers, _models(2 * GiB))
    message = placement.models[0].message
    assert message.startswith(
        "0/12 servers have room for 2Gi (Declared): s12 (1.2Gi free), s11 (1.1Gi free), s10 (1000Mi free)"
    )
    assert message.endswith("s03 (300Mi free) and 2 with less")
    nothing = place(_servers(("a", GiB)), _models(GiB, selector=LabelSelector(match_labels={"pool": "z"})))
    assert (
        nothing.models[0].message
        == "no TritonServer in namespace 'ns' matches pool=z: nothing can hold its 1Gi (Declared)"
    )


@pytest.mark.parametrize("seed", range(20))
def test_never_over_committed_and_stable_on_a_second_pass(seed: int) -> None:
    """Random fleets: no server's models come to more than its room, a model is unschedulable only where
    no matching server had room for it at the end, and placing again from the result changes nothing."""
    rng = random.Random(seed)
    pools = ["a", "b", "c"]
    servers = [
        ServerRoom("ns", f"s{index}", {"pool": rng.choice(pools)}, rng.choice([0, 1, 2]), rng.randrange(1, 64) * GiB)
        for index in range(20)
    ]
    selectors = {pool: LabelSelector(match_labels={"pool": pool}) for pool in pools}
    models = [
        ModelDemand(
            "ns",
            f"m{index}",
            int(rng.lognormvariate(20.8, 1)),
            MemorySource.DECLARED,
            selector=selectors[rng.choice(pools)],
        )
        for index in range(400)
    ]
    placement = place(servers, models)
    assert (
        0 < sum(p.server is None for p in placement.models) < len(models)
    )  # a fleet that fills, not one that fits nowhere
    for load in placement.servers:
        assert load.free_bytes is not None and load.free_bytes >= 0, load
        assert load.room.replicas > 0 or load.placed_bytes == 0
    free = {load.room.name: load.free_bytes for load in placement.servers}
    for placed in placement.models:
        if placed.server is None:
            matching = [s for s in servers if placed.model.selector.matches(s.labels) and s.replicas > 0]
            assert all(free[s.name] < placed.model.memory_bytes for s in matching), placed
    again = place(servers, [ModelDemand(**{**vars(p.model), "current": p.server}) for p in placement.models])
    assert [p.server for p in again.models] == [p.server for p in placement.models]


@pytest.mark.parametrize(
    ("spec", "capacity"),
    [
        ({}, (None, None)),
        ({"resources": {"limits": {"memory": "4Gi"}}}, (4 * GiB - TRITON_BASELINE_BYTES, None)),
        ({"resources": {"limits": {"memory": "32Mi"}}}, (0, None)),
        ({"resources": {"requests": {"memory": "4Gi"}}}, (None, None)),
        (
            {"resources": {"limits": {"memory": "4Gi"}}, "capacity": {"memory": "3Gi", "gpuMemory": "80Gi"}},
            (3 * GiB, 80 * GiB),
        ),
        ({"gpus": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}}, (None, 81559 * MiB)),
        ({"gpus": {"count": 2, "product": "NVIDIA-A100-SXM4-40GB"}}, (None, 2 * 40960 * MiB)),
        ({"gpus": {"count": 4, "product": "Tesla-T4"}}, (None, 4 * 15360 * MiB)),
        ({"gpus": {"count": 1, "product": "NVIDIA-H200"}, "capacity": {"gpuMemory": "100Gi"}}, (None, 100 * GiB)),
        ({"gpus": {"count": 1, "product": "NVIDIA-B200"}}, (None, None)),
        ({"gpus": {"count": 1}}, (None, None)),
    ],
    ids=[
        "nothing",
        "limit",
        "limit-below-baseline",
        "request-only",
        "capacity",
        "h100",
        "two-a100-40gb",
        "four-t4",
        "capacity-wins",
        "unknown-product",
        "no-product",
    ],
)
def test_server_capacity(spec: dict[str, Any], capacity: tuple[int | None, int | None]) -> None:
    assert server_capacity(TritonServerSpec.model_validate(spec)) == capacity


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ({}, {}, True),
        ({"matchLabels": {"pool": "a"}}, {"pool": "a", "x": "y"}, True),
        ({"matchLabels": {"pool": "a"}}, {"pool": "b"}, False),
        ({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]}]}, {"pool": "b"}, True),
        ({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}, {}, False),
        ({"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["a"]}]}, {"pool": "a"}, False),
        ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, {"gpu": ""}, True),
        ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, {"gpu": ""}, False),
    ],
)
def test_label_selector_matches_as_kubernetes_does(
    selector: dict[str, Any], labels: dict[str, str], matches: bool
) -> None:
    assert LabelSelector.model_validate(selector).matches(labels) is matches


@pytest.mark.parametrize(
    ("count", "words"),
    [(0, "0"), (1023, "1023"), (20 * MiB, "20Mi"), (1536 * MiB, "1.5Gi"), (-200, "-200"), (-3 * GiB, "-3Gi")],
)
def test_readable_bytes(count: int, words: str) -> None:
    assert readable_bytes(count) == words


@pytest.mark.parametrize(
    ("memory", "status", "counted"),
    [
        pytest.param({"gpu": "1Gi"}, None, GiB, id="declared"),
        pytest.param(None, None, 0, id="nothing declared"),
        pytest.param(
            {"gpu": "1Gi"},
            {"cpuBytes": 20 * MiB, "gpuBytes": 700 * MiB, "source": "Measured", "measuredAt": "2026-01-01T00:00:01Z"},
            700 * MiB,
            id="measured",
        ),
        pytest.param(
            {"gpu": "1Gi"},
            {"cpuBytes": 20 * MiB, "gpuBytes": GiB, "source": "Declared"},
            GiB,
            id="a status not measured: the spec's",
        ),
    ],
)
def test_placement_counts_the_measured_gpu_memory(
    memory: dict[str, str] | None, status: dict[str, Any] | None, counted: int
) -> None:
    spec = {"serverRef": {"name": "s"}, "config": {"backend": "python"}} | ({"memory": memory} if memory else {})
    document = {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonModel",
        "metadata": {"name": "m"},
        "spec": spec,
    }
    model = TritonModel.model_validate(document | ({"status": {"memory": status}} if status else {}))
    assert counted_gpu_bytes(model) == counted
