"""`triton-operator place` on a generated fleet: 10,000 TritonModels on 200 TritonServers.

The servers are four pools of 50 (labels pool=p0..p3), each pod offering 8 to 64 GiB (capacity.memory,
or a memory limit less Triton's baseline); 90% of the models have a serverSelector for one pool, the rest
name a server (serverRef) and count on it. Model sizes are log-normal (a median of a few hundred MiB, a
long tail of several GiB), scaled so that the models of each pool ask for `--demand` times its capacity.

Measured, each command a fresh process (render_throughput.py's child: the CLI in process after its
imports), median of `--repeats`:
- `place` against `validate` of the same files: goal, place costs under 1 s more (place renders no
  server objects, which validate checks, so it may cost less); and the placement alone, in process;
- the fill: bytes placed over the fleet's capacity, against the most the models allow (the sum of their
  sizes, capped by the capacity); goal, at least 90% of that where the models ask for more than there is;
- that no server is given more than its capacity.

    .venv/bin/python bench/placement_fleet.py [--models 10000] [--servers 200] [--repeats 3] [--demand 0.95 1.1]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import print_table
from render_throughput import CHILD_SECONDS, timed_command

GiB = 1 << 30
POOLS = 4
PINNED_SHARE = 0.1  # models that name their server
PINNED_BYTES = 64 << 20
GOAL_EXTRA_SECONDS = 1.0
GOAL_FILL = 0.9
CONFIG = {
    "backend": "python",
    "maxBatchSize": 8,
    "dynamicBatching": {},
    "input": [{"name": "IN", "dataType": "TYPE_FP32", "dims": [16]}],
    "output": [{"name": "OUT", "dataType": "TYPE_FP32", "dims": [16]}],
    "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
}


def generated_fleet(models: int, servers: int, demand: float, seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    documents: list[dict[str, Any]] = []
    capacity = [0] * POOLS
    pool_servers: list[list[str]] = [[] for _ in range(POOLS)]
    for index in range(servers):
        pool, name, room = index % POOLS, f"server-{index:03}", rng.choice([8, 16, 32, 64]) * GiB
        spec: dict[str, Any] = {"modelRepository": {"pvc": {"claimName": "models"}}}
        if index % 2:
            spec["capacity"] = {"memory": room}
        else:  # the same room from a memory limit: capacity is the limit less Triton's baseline
            spec["resources"] = {"limits": {"memory": room + (64 << 20)}}
        documents.append(
            {
                "apiVersion": "triton-operator.io/v1alpha1",
                "kind": "TritonServer",
                "metadata": {"name": name, "labels": {"pool": f"p{pool}"}},
                "spec": spec,
            }
        )
        capacity[pool] += room
        pool_servers[pool].append(name)
    # (size, pinned) per model of each pool; a pinned model is small: what names its server is meant to fit there.
    sizes: list[list[tuple[float, bool]]] = [[] for _ in range(POOLS)]
    for index in range(models):
        pinned = rng.random() < PINNED_SHARE
        sizes[index % POOLS].append((PINNED_BYTES, True) if pinned else (rng.lognormvariate(0, 1), False))
    for pool in range(POOLS):
        pinned_bytes = sum(size for size, pinned in sizes[pool] if pinned)
        scale = (demand * capacity[pool] - pinned_bytes) / sum(size for size, pinned in sizes[pool] if not pinned)
        for number, (size, pinned) in enumerate(sizes[pool]):
            name = f"model-{pool}-{number:05}"
            memory = int(size) if pinned else int(size * scale)
            where = (
                {"serverRef": {"name": rng.choice(pool_servers[pool])}}
                if pinned
                else {"serverSelector": {"matchLabels": {"pool": f"p{pool}"}}}
            )
            spec = {**where, "memory": {"cpu": memory}, "modelName": name.replace("-", "_"), "config": CONFIG}
            documents.append(
                {
                    "apiVersion": "triton-operator.io/v1alpha1",
                    "kind": "TritonModel",
                    "metadata": {"name": name},
                    "spec": spec,
                }
            )
    return documents


def measure(argv: list[str], repeats: int) -> dict[str, float]:
    runs = []
    for _ in range(repeats):
        child = subprocess.run(
            [sys.executable, __file__, "--child", *argv],
            capture_output=True,
            text=True,
            check=True,
            timeout=CHILD_SECONDS,
        )
        runs.append(json.loads(child.stdout))
        assert runs[-1]["code"] in (0, 1), runs[-1]  # place exits 1 when some model fits nowhere
    return {key: statistics.median(run[key] for run in runs) for key in ("cpu", "wall")}


def placed(fleet: Path, repeats: int) -> tuple[dict[str, Any], float]:
    """`place -o json`'s answer, and the median seconds of the placement alone, on the fleet as read."""
    from triton_operator.cli import main
    from triton_operator.render.fleet import fleet_placement
    from triton_operator.sources import load

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(["place", str(fleet), "-o", "json"])
    loaded = load([fleet])
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fleet_placement(loaded.fleet)
        seconds.append(time.perf_counter() - start)
    return json.loads(out.getvalue()), statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", type=int, default=10_000)
    parser.add_argument("--servers", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--demand", type=float, nargs="+", default=[0.95, 1.1], help="what the models ask for, over the capacity"
    )
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        timed_command(args.child)
        return
    rows = []
    for demand in args.demand:
        with tempfile.TemporaryDirectory(prefix="bench-place-") as tmp:
            fleet = Path(tmp) / "fleet.yaml"
            fleet.write_text(
                "".join(
                    f"---\n{json.dumps(document)}\n" for document in generated_fleet(args.models, args.servers, demand)
                )
            )
            validate = measure(["validate", str(fleet)], args.repeats)
            place = measure(["place", str(fleet)], args.repeats)
            result, placing = placed(fleet, args.repeats)
        capacity = sum(server["capacityBytes"] for server in result["servers"])
        used = sum(server["placedBytes"] for server in result["servers"])
        asked = sum(model["memoryBytes"] for model in result["models"])
        over = [server["name"] for server in result["servers"] if server["placedBytes"] > server["capacityBytes"]]
        unschedulable = sum(1 for model in result["models"] if model["server"] is None)
        extra = place["wall"] - validate["wall"]
        fill = used / min(capacity, asked)
        rows.append(
            [
                f"{demand:.2f}",
                f"{validate['wall'] * 1000:.0f}",
                f"{place['wall'] * 1000:.0f}",
                f"{extra * 1000:+.0f} ({'met' if extra < GOAL_EXTRA_SECONDS else 'missed'})",
                f"{placing * 1000:.0f}",
                f"{used / capacity:.1%}",
                f"{fill:.1%} ({'met' if fill >= GOAL_FILL else 'missed'})",
                str(unschedulable),
                str(len(over)),
            ]
        )
    print_table(
        [
            "demand / capacity",
            "validate wall ms",
            "place wall ms",
            "place - validate ms (< 1000)",
            "placing alone ms",
            "capacity used",
            "of what the models allow (>= 90%)",
            "unschedulable",
            "servers over capacity",
        ],
        rows,
    )
    print(
        f"\n{args.models} TritonModels, {args.servers} TritonServers, {args.repeats} repeats of each command, "
        "each a fresh process (medians)"
    )


if __name__ == "__main__":
    main()
