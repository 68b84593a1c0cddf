"""`triton-operator run`: the operator against a cluster, with kopf's conventions for namespaces."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kopf
import prometheus_client

from ...speed.collector import freezing_survivors
from ..election.leading import kopf_terms, run_elected
from ..watch.handlers import default_login, register
from . import metrics
from .settings import Settings

SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


def credentials_missing() -> str:
    """Why the operator cannot log in at all, or "": kopf would otherwise retry the login for ever."""
    kubeconfigs = [Path(p).expanduser() for p in os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep) if p]
    if SERVICE_ACCOUNT_TOKEN.exists() or any(path.is_file() for path in kubeconfigs):
        return ""
    where = ", ".join(str(path) for path in kubeconfigs) or "(KUBECONFIG is empty)"
    return f"no Kubernetes credentials: not in a pod (no {SERVICE_ACCOUNT_TOKEN}) and no kubeconfig at {where}"


def run(clusterwide: bool, namespaces: Sequence[str], settings: Settings | None = None) -> int:
    if missing := credentials_missing():
        print(f"triton-operator run: {missing}", file=sys.stderr)
        return 2
    settings = settings or Settings()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings.metrics_port:
        prometheus_client.start_http_server(settings.metrics_port, registry=metrics.REGISTRY)
    scope: dict[str, Any] = {"clusterwide": clusterwide, "namespaces": list(namespaces)}
    operate = kopf_terms(settings, default_login, **scope)
    with freezing_survivors(metrics.observe_collection):
        if settings.leader_election:  # kopf only while this process holds the Lease; it stands by again if it loses it
            return asyncio.run(run_elected(settings, operate, default_login))
        metrics.LEADER.set(1)
        liveness = f"http://0.0.0.0:{settings.liveness_port}/healthz" if settings.liveness_port else None
        registry = kopf.OperatorRegistry()
        register(registry, settings)
        asyncio.run(kopf.operator(registry=registry, standalone=True, liveness_endpoint=liveness, **scope))
    return 0
