"""What each speed-only re-implementation of speed/ saves against what it stands for, on 1,000 varied
TritonModels (tests/support/fleet.py): a config built by protobuf's C constructor
(speed/config_constructor.py) against protobuf's JSON parser after the field check, and manifests.yaml
written in Python (speed/manifest_yaml.py) against PyYAML's representer and libyaml's emitter. Both sides
give the same result (tests/speed/); this bench says what the difference costs. The other two modules of
speed/ act at 10,000 models and are measured by bench/operator_overhead.py (RESULTS.md, "Measurements
behind the design").

    .venv/bin/python bench/speed_paths.py [--models 1000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import yaml
from common import print_table

from tests.support.fleet import varied_fleet
from triton_operator.api import config_json
from triton_operator.api.parse import parse_resources
from triton_operator.render.fleet import model_config_maps, plan_fleet, server_objects
from triton_operator.render.manifests import CONTROL_KEY
from triton_operator.speed.manifest_yaml import manifests_yaml
from triton_operator.yaml_io import NEVER_FOLD, ManifestDumper


def best_of(repeats: int, work: Callable[[], Any]) -> float:
    """The median CPU seconds of `repeats` runs of `work` (process time: what this process spent)."""
    times = []
    for _ in range(repeats):
        started = time.process_time()
        work()
        times.append(time.process_time() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    documents = varied_fleet(options.models)
    configs = [d["spec"]["config"] for d in documents if d["kind"] == "TritonModel"]
    config_maps = {("default", d["metadata"]["name"]): d for d in documents if d["kind"] == "ConfigMap"}
    servers, models, found = parse_resources([d for d in documents if d["kind"] != "ConfigMap"])
    fleet = plan_fleet(servers, models, config_maps, earlier=found)
    objects = [
        obj
        for rendered in fleet.servers
        for obj in server_objects(rendered, {CONTROL_KEY: "key"}) + model_config_maps(rendered.models)
    ]

    def by_parser() -> None:
        for config in configs:
            config_json._parse_json_mapping(config, "spec.config")

    def by_constructor() -> None:
        for config in configs:
            config_json.parse_model_config(config)

    def by_libyaml() -> None:
        yaml.dump_all(objects, Dumper=ManifestDumper, sort_keys=False, width=NEVER_FOLD, allow_unicode=True)

    rows = []
    for what, slow, fast in (
        (f"{len(configs)} configs parsed", by_parser, by_constructor),
        (f"manifests.yaml of {len(objects)} objects", by_libyaml, lambda: manifests_yaml(objects)),
    ):
        slow_s, fast_s = best_of(options.repeats, slow), best_of(options.repeats, fast)
        rows.append([what, f"{slow_s * 1000:.0f}", f"{fast_s * 1000:.0f}", f"{slow_s / fast_s:.1f}x"])
    print(f"load average {os.getloadavg()[0]:.1f}, median CPU ms of {options.repeats}")
    print_table(["what", "what it stands for", "speed/", "saved"], rows)


if __name__ == "__main__":
    main()
