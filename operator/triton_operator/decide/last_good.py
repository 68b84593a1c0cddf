"""What the pods run for each model: the model as rendered now while it is valid, its last good rendering
while it is refused. A bad declaration never unloads a good running version."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TypeVar

from ..protocol.desired import DesiredModel
from ..render.fleet import RenderedServer
from .seen import ParsedModel

Key = TypeVar("Key")
Kept = TypeVar("Kept")


def keep_last_good(
    last_good: Mapping[Key, Kept], current: Mapping[Key, Kept], refused: Collection[Key]
) -> dict[Key, Kept]:
    """What runs: every model as rendered now, and each refused one at its last good rendering (a bad
    declaration never unloads a good running version). A model no longer declared is dropped."""
    return {key: kept for key, kept in last_good.items() if key in refused and key not in current} | dict(current)


def desired_models(
    rendered: RenderedServer,
    models: Sequence[ParsedModel],
    refused_ids: Collection[str],
    last_good: Mapping[str, DesiredModel],
) -> tuple[dict[str, DesiredModel], set[str], dict[str, DesiredModel]]:
    """What the pods run, by Triton name: valid models as rendered, refused ones (`refused_ids`: their
    object ids) at their last good rendering (`last_good`, by model uid); the models left as they run,
    refused and never rendered good here; and the last good renderings for the next pass."""
    current = {r.model.metadata.uid or "": r.desired for r in rendered.models}
    refused = {p.uid: p for p in models if not p.deleting and (p.model is None or p.object_id in refused_ids)}
    kept = keep_last_good(last_good, current, refused)
    desired = {model.name: model for uid, model in kept.items() if uid not in current}
    desired |= {model.name: model for model in current.values()}
    keep = {p.model.model_name for uid, p in refused.items() if p.model is not None and uid not in kept}
    return desired, keep, kept
