"""What a server's worker keeps from one pass to the next, so that a pass costs what changed, not what
the server holds.

- Each object is parsed once per resourceVersion: the API server gives every content of an object a
  resourceVersion of its own.
- Each model is rendered once for what render_model reads: the model's name, namespace and spec, its
  server's spec, and the ConfigMap its files name. These are compared, not trusted to a version, so
  an edited server spec (an inline one too: it is the model's), an edited ConfigMap or a renamed model
  renders again. What depends on all of a server's models (names that collide, /dev/shm and its
  findings) is worked out each pass, from the kept renderings.

Entries are kept per object uid and dropped at the first pass without their object: what is kept is
bounded by the server's models, and goes with its worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...api.findings import Finding
from ...api.resources import TritonModel, TritonServer
from ...decide.seen import ParsedModel, parse_server
from ...render import model_rendering


def _version(body: Mapping[str, Any]) -> tuple[str, str | None]:
    meta = body.get("metadata") or {}
    return meta.get("uid", ""), meta.get("resourceVersion")


class Parses:
    """The server and its models as parsed, per uid at a resourceVersion (an object listed without one
    is parsed every pass)."""

    def __init__(self) -> None:
        self.models: dict[str, tuple[str | None, ParsedModel]] = {}
        self.server: tuple[tuple[str, str | None], TritonServer | None, list[Finding]] | None = None

    def models_of(self, bodies: Iterable[Mapping[str, Any]]) -> list[ParsedModel]:
        kept: dict[str, tuple[str | None, ParsedModel]] = {}
        parsed = []
        for body in bodies:
            uid, version = _version(body)
            entry = self.models.get(uid)
            if entry is None or version is None or entry[0] != version:
                entry = (version, ParsedModel.of(body))
            kept[uid] = entry
            parsed.append(entry[1])
        self.models = kept
        return parsed

    def server_of(self, body: Mapping[str, Any] | None) -> tuple[TritonServer | None, list[Finding]]:
        if body is None:
            self.server = None
            return None, []
        version = _version(body)
        if self.server is None or version[1] is None or self.server[0] != version:
            self.server = (version, *parse_server(body))
        return self.server[1], list(self.server[2])


@dataclass(frozen=True)
class _Rendering:
    inputs: tuple[Any, ...]  # what render_model read
    rendered: model_rendering.RenderedModel | None
    findings: list[Finding]


class Renderings:
    """Each model's last rendering, with what it was made from."""

    def __init__(self) -> None:
        self.kept: dict[str, _Rendering] = {}  # model uid -> its last rendering

    def for_pass(self) -> model_rendering.ModelRenderer:
        """render_model for one plan_fleet: a model whose inputs are as last time gets its kept rendering
        (with the model as now listed); the renderings of models it is not asked for are dropped."""
        previous, self.kept = self.kept, {}

        def render(
            model: TritonModel, server: TritonServer | None, config_map: Mapping[str, Any] | None
        ) -> tuple[model_rendering.RenderedModel | None, list[Finding]]:
            uid = model.metadata.uid or ""
            inputs = (
                model.metadata.name,
                model.metadata.namespace,
                model.spec,
                None if server is None else server.spec,
                config_map,
            )
            kept = self.kept.get(uid) or previous.get(uid)
            if kept is None or kept.inputs != inputs:
                kept = _Rendering(inputs, *model_rendering.render_model(model, server, config_map))
            elif kept.rendered is not None and kept.rendered.model is not model:  # the same spec, listed anew
                kept = _Rendering(inputs, kept.rendered.relisted(model), kept.findings)
            self.kept[uid] = kept
            return kept.rendered, list(kept.findings)

        return render
