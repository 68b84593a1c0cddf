"""`make cluster` / `make cluster-stop`: a control plane in .cluster/, left running between them."""

from __future__ import annotations

import os
import shutil
import sys

from . import ROOT, ControlPlane, ControlPlaneError, missing_binaries, stop_recorded
from .network import can_make_networks

DIRECTORY = ROOT / ".cluster/run"  # made anew by each `up`
KUBECONFIG = ROOT / ".cluster/kubeconfig"


def main(argv: list[str]) -> int:
    if argv == ["up"]:
        if missing := missing_binaries():
            print(f"not built: {', '.join(missing)} (run `make cluster-build`, which needs Go)", file=sys.stderr)
            return 1
        stop_recorded(DIRECTORY)
        shutil.rmtree(DIRECTORY, ignore_errors=True)
        nodes = int(os.environ.get("NODES", "1")) if can_make_networks() else 0  # without root: the API server alone
        plane = ControlPlane(DIRECTORY, nodes=nodes)
        try:
            plane.start()
        except ControlPlaneError as error:
            print(error, file=sys.stderr)
            return 1
        shutil.copy(plane.kubeconfig, KUBECONFIG)
        print(f"API server {plane.server}; logs in {plane.logs}")
        print(f"export KUBECONFIG={KUBECONFIG}")
        return 0
    if argv == ["down"]:
        ended = stop_recorded(DIRECTORY)
        print(f"ended: {', '.join(ended) or 'nothing was running'}")
        return 0
    print("usage: python -m tests.support.controlplane up|down", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
