"""Render + validate throughput for 1,000 varied TritonModels (tests/support/fleet.py: every backend,
batching kind and ensemble of Triton's examples, GPU groups, python models with files, dedicated servers).

Each repeat is a fresh process that, after its imports (start-up is bench/cli_startup.py's), runs the
CLI's `validate` or `render` in process and reports its CPU time (user and system apart: the kernel's
share is mostly creating or rewriting the model folders and files) and wall time: the caches it builds
(Kubernetes schemas) are paid as a user pays them. Every repeat renders into the same folder, so the
first creates the files and the others rewrite them. Single-threaded, so CPU seconds are one core's.
Goal: render (which validates too) >= 2,000 models/s of CPU time (user + system).

    .venv/bin/python bench/render_throughput.py [--models 1000] [--repeats 5] [--profile]

--profile prints where one render's time goes (pyinstrument, the `bench` extra) instead.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from common import print_table

from tests.support.fleet import varied_fleet

GOAL_MODELS_PER_SECOND = 2000
CHILD_SECONDS = 600  # one child's command, at the largest --models: far past it, it hangs


def timed_command(argv: list[str]) -> None:
    """The child: run one CLI command in process, as the console script does (main() reading the
    process's command line, which is what freezes the loaded modules out of the collector's walks), and
    print its user, system and wall seconds as JSON."""
    from triton_operator.cli import main

    sys.argv = ["triton-operator", *argv]
    wall, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main()
    after = resource.getrusage(resource.RUSAGE_SELF)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    print(
        json.dumps(
            {"code": code, "cpu": user + system, "user": user, "sys": system, "wall": time.perf_counter() - wall}
        )
    )


def profiled_command(argv: list[str]) -> None:
    from pyinstrument import Profiler

    from triton_operator.cli import main

    with Profiler() as profiler, contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(argv)
    print(profiler.output_text(color=False, show_all=False))


def measure(argv: list[str], repeats: int) -> list[dict[str, float]]:
    runs = []
    for _ in range(repeats):
        child = subprocess.run(
            [sys.executable, __file__, "--child", *argv],
            capture_output=True,
            text=True,
            check=True,
            timeout=CHILD_SECONDS,
        )
        run = json.loads(child.stdout)
        assert run["code"] == 0, f"{argv} exited {run['code']}"
        runs.append(run)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        timed_command(args.child)
        return
    with tempfile.TemporaryDirectory(prefix="bench-render-") as tmp:
        fleet = Path(tmp) / "fleet.yaml"
        fleet.write_text(yaml.safe_dump_all(varied_fleet(args.models), sort_keys=False))
        if args.profile:
            profiled_command(["render", str(fleet), "--out", f"{tmp}/out"])
            return
        rows = []
        for command, argv in (
            ("validate", ["validate", str(fleet)]),
            ("render", ["render", str(fleet), "--out", f"{tmp}/out"]),
        ):
            runs = measure(argv, args.repeats)
            cpu, user, system, wall = (
                statistics.median(r[key] for r in runs) for key in ("cpu", "user", "sys", "wall")
            )
            rate = args.models / cpu
            goal = (
                f">= {GOAL_MODELS_PER_SECOND}: {'met' if rate >= GOAL_MODELS_PER_SECOND else 'missed'}"
                if command == "render"
                else ""
            )
            rows.append(
                [
                    command,
                    f"{cpu * 1000:.0f}",
                    f"{user * 1000:.0f}",
                    f"{system * 1000:.0f}",
                    f"{wall * 1000:.0f}",
                    f"{rate:.0f}",
                    goal,
                ]
            )
    print_table(["command", "CPU ms (median)", "user ms", "sys ms", "wall ms (median)", "models/s (CPU)", "goal"], rows)
    print(f"\n{args.models} TritonModels, {args.repeats} repeats, each a fresh process")


if __name__ == "__main__":
    main()
