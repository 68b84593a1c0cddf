"""`triton-operator place`: which server each model with a serverSelector takes, as a table or JSON.

Apart from the other fleet commands because the placement's report (two aligned tables, the models
no server holds, a JSON form for scripts) is most of it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..render.fleet import fleet_placement
from ..render.placement import Placement, readable_bytes
from ..sources import load
from .fleet_commands import report


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip() for row in rows]


def _bytes(count: int | None) -> str:
    return "unknown" if count is None else readable_bytes(count)


def placement_json(placement: Placement) -> dict[str, Any]:
    """`place -o json`: host bytes for every model and server; GPU bytes beside them where given."""
    models = []
    for placed in placement.models:
        model = placed.model
        entry: dict[str, Any] = {
            "name": model.name,
            "namespace": model.namespace,
            "server": placed.server,
            "memoryBytes": model.memory_bytes,
            "source": model.source.value,
        }
        if model.gpu_memory_bytes:
            entry["gpuMemoryBytes"] = model.gpu_memory_bytes
        models.append(entry)
    servers = []
    for server in placement.servers:
        entry = {
            "name": server.room.name,
            "namespace": server.room.namespace,
            "capacityBytes": server.room.memory_bytes,
            "placedBytes": server.placed_bytes,
        }
        if server.room.gpu_memory_bytes is not None:
            entry |= {"gpuCapacityBytes": server.room.gpu_memory_bytes, "gpuPlacedBytes": server.placed_gpu_bytes}
        servers.append(entry)
    return {"models": models, "servers": servers}


def placement_lines(placement: Placement) -> list[str]:
    """The models by server, the servers' room, then each unschedulable model and why."""
    gpu = any(server.room.gpu_memory_bytes is not None for server in placement.servers)
    models = sorted(placement.models, key=lambda p: (p.server is None, p.model.namespace, p.server or "", p.model.name))
    rows = [("MODEL", "NAMESPACE", "SERVER", "MEMORY", "SOURCE", *(("GPU MEMORY",) if gpu else ()))]
    for placed in models:
        model = placed.model
        rows.append(
            (
                model.name,
                model.namespace,
                placed.server or "(unschedulable)",
                _bytes(model.memory_bytes),
                model.source.value,
                *((_bytes(model.gpu_memory_bytes),) if gpu else ()),
            )
        )
    server_rows = [
        (
            "SERVER",
            "NAMESPACE",
            "REPLICAS",
            "CAPACITY",
            "PLACED",
            "FREE",
            *(("GPU CAPACITY", "GPU FREE") if gpu else ()),
        )
    ]
    for server in placement.servers:
        room = server.room
        gpu_cells = (
            _bytes(room.gpu_memory_bytes),
            _bytes(None if room.gpu_memory_bytes is None else room.gpu_memory_bytes - server.placed_gpu_bytes),
        )
        server_rows.append(
            (
                room.name,
                room.namespace,
                str(room.replicas),
                _bytes(room.memory_bytes),
                _bytes(server.placed_bytes),
                _bytes(server.free_bytes),
                *(gpu_cells if gpu else ()),
            )
        )
    unschedulable = [
        f"unschedulable: {p.model.namespace}/{p.model.name}: {p.message}"
        for p in models
        if p.server is None and p.message
    ]
    return [*_aligned(rows), "", *_aligned(server_rows), *([""] if unschedulable else []), *unschedulable]


def cmd_place(args: argparse.Namespace) -> int:
    loaded = load(args.files)
    # Each selector model's warning that it is checked alone points here: what follows answers it.
    loaded.fleet.findings = [
        f for f in loaded.fleet.findings if not (f.severity == "warning" and f.path == "spec.serverSelector")
    ]
    code = report(loaded, summary_to=sys.stderr)
    placement = fleet_placement(loaded.fleet)
    if args.output == "json":
        print(json.dumps(placement_json(placement), indent=2))
    else:
        print("\n".join(placement_lines(placement)))
    unschedulable = sum(1 for placed in placement.models if placed.model.selector is not None and placed.server is None)
    if unschedulable:
        print(f"{unschedulable} model{'' if unschedulable == 1 else 's'} fit on no server", file=sys.stderr)
    return code or (1 if unschedulable else 0)
