"""`triton-operator run`: the operator against a cluster, with kopf's conventions for namespaces."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import kopf
import prometheus_client

from . import metrics
from .handlers import register
from .settings import Settings


def run(clusterwide: bool, namespaces: Sequence[str], settings: Settings | None = None) -> int:
    settings = settings or Settings()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    registry = kopf.OperatorRegistry()
    register(registry, settings)
    if settings.metrics_port:
        prometheus_client.start_http_server(settings.metrics_port, registry=metrics.REGISTRY)
    liveness = f"http://0.0.0.0:{settings.liveness_port}/healthz" if settings.liveness_port else None
    asyncio.run(
        kopf.operator(
            registry=registry,
            clusterwide=clusterwide,
            namespaces=list(namespaces),
            standalone=True,
            liveness_endpoint=liveness,
        )
    )
    return 0
