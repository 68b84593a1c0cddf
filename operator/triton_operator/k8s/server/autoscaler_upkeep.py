"""A server's autoscaler, around the children: the one the spec no longer asks for is named for deletion,
and the HorizontalPodAutoscaler that scales the server is read for its status.

Children applies the autoscaler the spec asks for (render/autoscaler_manifests.py), as it applies the
Deployment. An autoscaler left behind would go on scaling the server, so the one the operator made for
an engine the spec no longer names, or for autoscaling the spec no longer has, is deleted: the only
objects the operator deletes. What it made is known from the server's status.autoscaling (its engine),
so a spec changed while the operator was down is caught too.

The status reads the HPA that scales the server once a pass: the operator's own, or the one KEDA makes
for the ScaledObject (KEDA's status carries no metric values). Its figures are as of the last pass.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ...api.resources import TritonServer
from ...api.status_fields import AutoscalingStatus
from ...api.types import parse_quantity
from ...decide.seen import ServerKey
from ...render.autoscaler_manifests import scaling_hpa_name, target_metric
from ..api import API_FAILURES, KubernetesApi, failure

logger = logging.getLogger(__name__)

AUTOSCALER_KINDS = {"hpa": "HorizontalPodAutoscaler", "keda": "ScaledObject"}  # what the operator makes, per engine


def unwanted_autoscaler(server: TritonServer, made: AutoscalingStatus | None) -> tuple[str, str] | None:
    """The kind and name of what the operator made (`made`, the status as last written) when the spec no
    longer asks for it: deleted by the pass (until then the status keeps naming it)."""
    wanted = server.spec.autoscaling
    if made is None or (wanted is not None and wanted.engine == made.engine):
        return None
    return AUTOSCALER_KINDS[made.engine], server.name


class Autoscaler:
    """Reads the HorizontalPodAutoscaler that scales a server."""

    def __init__(self, key: ServerKey, api: KubernetesApi):
        self.key = key
        self.api = api

    async def status(self, server: TritonServer) -> tuple[AutoscalingStatus | None, bool]:
        """The autoscaling status, from the HPA that scales the server; False when it could not be read."""
        name = scaling_hpa_name(server)
        if name is None:
            return None, True
        try:
            hpa = await self.api.get("HorizontalPodAutoscaler", self.key[0], name)
        except API_FAILURES as error:
            return autoscaling_status(
                server, None, f"HorizontalPodAutoscaler {name} could not be read: {failure(error)}"
            ), False
        return autoscaling_status(server, hpa), True


def autoscaling_status(server: TritonServer, hpa: Mapping[str, Any] | None, unread: str = "") -> AutoscalingStatus:
    """What the HPA says of the server's metric: its current value, and why it cannot scale if it cannot."""
    autoscaling = server.spec.autoscaling
    assert autoscaling is not None  # called for servers with autoscaling only
    name = scaling_hpa_name(server) or ""
    metric, target = target_metric(autoscaling.target)
    status = (hpa or {}).get("status") or {}
    if unread:
        message = unread
    elif hpa is None and autoscaling.engine == "keda":
        message = (
            f"KEDA has not made HorizontalPodAutoscaler {name} for ScaledObject {server.name} yet: is KEDA running?"
        )
    elif hpa is None:
        message = f"HorizontalPodAutoscaler {name} is not there yet"
    else:
        message = _not_scaling(status.get("conditions") or [])
    return AutoscalingStatus(
        engine=autoscaling.engine,
        autoscaler=f"HorizontalPodAutoscaler/{name}",
        metric=metric,
        target=target,
        current=_current_value(status.get("currentMetrics") or []),
        message=message,
    )


def _current_value(metrics: Sequence[Mapping[str, Any]]) -> float | None:
    """The first metric's current value (the only one the operator renders): a Pods metric's average, or
    an External one's value (KEDA's); quantities such as 1500m are read as numbers."""
    if not metrics:
        return None
    kind = metrics[0].get("type", "")
    source = metrics[0].get(kind[:1].lower() + kind[1:]) or {}
    current = source.get("current") or {}
    value = current.get("averageValue", current.get("value"))
    return None if value is None else round(float(parse_quantity(str(value))), 3)


def _not_scaling(conditions: Sequence[Mapping[str, Any]]) -> str:
    """The HPA's own words when it cannot compute a scale, e.g. a metric nobody serves (no adapter rule)."""
    inactive = next((c for c in conditions if c.get("type") == "ScalingActive" and c.get("status") == "False"), None)
    return "" if inactive is None else f"{inactive.get('reason', '')}: {inactive.get('message', '')}"
