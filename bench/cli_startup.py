"""CLI start-up: `triton-operator validate` of one file, hyperfine-style (warm-up, then repeats; the
median, the fastest and p90), next to the interpreter alone and `--help`; then the slowest imports of
the validate run by `python -X importtime`. Goal: validate of one file <= 250 ms. A server that passes
Kubernetes objects to its pod (tolerations here) is timed too: only its Deployment needs the
Kubernetes schema.

    .venv/bin/python bench/cli_startup.py [--repeats 20]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from common import ROOT, print_table

GOAL_MS = 250
RUN_SECONDS = 60  # one CLI run: far past its start-up, it hangs
CLI = [sys.executable, "-m", "triton_operator.cli"]
MODEL = "triton-operator validate examples/add-sub.yaml (a model)"
SERVER = "triton-operator validate examples/server.yaml (a server)"
TOLERATING_SERVER = "triton-operator validate of that server with pod tolerations (Kubernetes schema too)"
TOLERATIONS = "  pod: {tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]}\n"
# Bytecode caches written and used, as for an installed package (pip compiles it at install): a
# PYTHONDONTWRITEBYTECODE in the caller's environment would time compiling our sources instead.
ENVIRONMENT = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"} | {
    "PYTHONPATH": str(ROOT / "operator")
}


def runs(command: list[str], repeats: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (user + system) seconds of each run, after two warm-up runs fill the file cache."""
    walls, cpus = [], []
    for index in range(repeats + 2):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(
            command,
            cwd=ROOT,
            env=ENVIRONMENT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
            timeout=RUN_SECONDS,
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if index >= 2:
            walls.append(wall)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return walls, cpus


def slowest_imports(command: list[str], count: int = 8) -> list[tuple[str, float]]:
    """The top-level imports (cumulative, ms) of one run, slowest first."""
    result = subprocess.run(
        [command[0], "-X", "importtime", *command[1:]],
        cwd=ROOT,
        env=ENVIRONMENT,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    top = []
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and not line.endswith("| package"):
            _, cumulative, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
            if not name.startswith(" ") and cumulative.isdigit() and not line.split("|")[2].startswith("  "):
                top.append((name, int(cumulative) / 1000))
    return sorted(top, key=lambda item: -item[1])[:count]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    rows = []
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as tolerating:
        tolerating.write((ROOT / "examples/server.yaml").read_text() + TOLERATIONS)
        tolerating.flush()
        commands = {
            "python -c pass (the interpreter alone)": [sys.executable, "-c", "pass"],
            "triton-operator --help": [*CLI, "--help"],
            MODEL: [*CLI, "validate", "examples/add-sub.yaml"],
            SERVER: [*CLI, "validate", "examples/server.yaml"],
            TOLERATING_SERVER: [*CLI, "validate", tolerating.name],
        }
        for name, command in commands.items():
            walls, cpus = runs(command, args.repeats)
            median = statistics.median(walls) * 1000
            goal = f"<= {GOAL_MS} ms: {'met' if median <= GOAL_MS else 'missed'}" if name in (MODEL, SERVER) else ""
            p90 = sorted(walls)[int(0.9 * (len(walls) - 1))] * 1000
            rows.append(
                [
                    name,
                    f"{median:.0f}",
                    f"{min(walls) * 1000:.0f}",
                    f"{p90:.0f}",
                    f"{statistics.median(cpus) * 1000:.0f}",
                    goal,
                ]
            )
    print_table(["command", "median ms", "min ms", "p90 ms", "CPU ms (median)", "goal"], rows)
    print(f"\n{args.repeats} runs each after 2 warm-up runs\n")
    imports = slowest_imports(commands[SERVER])
    print_table(
        ["slowest top-level imports of validate examples/server.yaml (-X importtime)", "cumulative ms"],
        [[n, f"{ms:.0f}"] for n, ms in imports],
    )


if __name__ == "__main__":
    main()
