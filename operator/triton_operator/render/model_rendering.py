"""One TritonModel rendered alone: its config built and checked, its files read, its revision made.

Its own module because a model's rendering is the unit the operator keeps from pass to pass
(k8s/server/kept.py renders a model again only when what it reads changed): render_model reads nothing but
the model, its server's spec and the ConfigMap its files name. Binding models to servers, and what
needs the whole fleet, is render/fleet.py's.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..api.findings import Finding, errors
from ..api.parse import DEFAULT_NAMESPACE
from ..api.probe_spec_checks import validate_probe
from ..api.resources import TritonModel, TritonServer
from ..api.server_checks import validate_against_server, validate_execution_env
from ..api.validation import validate_model_config
from ..protocol.desired import DesiredModel
from . import manifests
from .config import built_model_config, desired_model
from .shm import ModelShm, model_shm


@dataclass(frozen=True)
class RenderedModel:
    """A model's rendering: the model as listed and its revision (`desired`), the one value the pods
    load, the revision ConfigMaps keep and the status names. The operator keeps one per model for as
    long as it runs, so it holds no live protobuf message (`desired.parsed_config()` makes one)."""

    model: TritonModel
    desired: DesiredModel
    files: Mapping[str, bytes] = field(
        default_factory=dict
    )  # those its CR names (an ensemble loads an empty version folder)
    shm: ModelShm | None = None  # its share of its server's /dev/shm; None while it has no server

    @property
    def name(self) -> str:
        """Triton's name for it."""
        return self.desired.name

    @property
    def revision(self) -> str:
        return self.desired.revision

    @functools.cached_property
    def config_map(self) -> dict[str, Any]:
        """Its ConfigMap with the rendered config.pbtxt, made once for it: a kept rendering costs nothing
        the next pass. Never to be changed in place."""
        return manifests.model_config_map(self.model, self.revision, self.desired.config_pbtxt)

    def relisted(self, model: TritonModel) -> RenderedModel:
        """The same rendering for the model as listed again with the same spec (a status written, a label
        set): its revision is kept, what reads the model is made anew."""
        return dataclasses.replace(self, model=model)


@functools.lru_cache(maxsize=1024)
def _file_bytes(content: str, binary: bool = False) -> bytes:
    """A file's bytes from its ConfigMap's text: one copy for every model that names the same file (the
    operator keeps each model's rendering, and a fleet often shares one model.py)."""
    return base64.b64decode(content) if binary else content.encode()


def files_from_config_map(model: TritonModel, config_map: Mapping[str, Any]) -> tuple[dict[str, bytes], list[Finding]]:
    """The model's files out of its ConfigMap (`data` or `binaryData`), with a finding per missing key."""
    assert model.spec.files is not None
    reference = model.spec.files.config_map_ref
    data = config_map.get("data") or {}
    binary = config_map.get("binaryData") or {}
    files: dict[str, bytes] = {}
    findings: list[Finding] = []
    for index, item in enumerate(reference.items):
        if item.key in data:
            files[item.path] = _file_bytes(data[item.key])
        elif item.key in binary:
            files[item.path] = _file_bytes(binary[item.key], binary=True)
        else:
            findings.append(
                Finding(
                    "error",
                    f"spec.files.configMapRef.items[{index}].key",
                    f"ConfigMap '{reference.name}' has no key '{item.key}'; its "
                    f"keys: {', '.join(sorted([*data, *binary]))}",
                )
            )
    return files, findings


def _render_model(
    model: TritonModel, server: TritonServer | None, files: Mapping[str, bytes]
) -> tuple[RenderedModel | None, list[Finding]]:
    config, printed = built_model_config(model, files)
    declared_name = model.spec.config.get("name")
    findings = validate_model_config(config)
    findings += validate_probe(model.spec.rollout.probe if model.spec.rollout else None, config)
    findings += validate_execution_env(config, set(files) if model.spec.files is not None else None)
    if declared_name is not None and declared_name != model.model_name:
        findings.append(
            Finding(
                "error", "spec.config.name", f"the name comes from modelName ('{model.model_name}'): remove config.name"
            )
        )
    if server is not None:
        findings += validate_against_server(config, server.spec, has_files=model.spec.files is not None)
    if errors(findings):
        return None, findings
    shm = model_shm(model, config, server.spec) if server is not None else None
    desired = desired_model(config, files, model.spec.load_timeout_seconds, printed)
    return RenderedModel(model, desired, files, shm), findings


ModelRenderer = Callable[
    [TritonModel, TritonServer | None, Mapping[str, Any] | None], tuple[RenderedModel | None, list[Finding]]
]


def render_model(
    model: TritonModel, server: TritonServer | None, config_map: Mapping[str, Any] | None
) -> tuple[RenderedModel | None, list[Finding]]:
    """One model on its server (None: not there) with the ConfigMap its files name (None: none, or
    missing): its rendering, or None and the findings that refuse it. It reads nothing else, so a
    rendering can be kept while these stay the same."""
    files: dict[str, bytes] = {}
    missing: list[Finding] = []
    if model.spec.files is not None:
        reference = model.spec.files.config_map_ref.name
        if config_map is None:
            missing = [
                Finding(
                    "error",
                    "spec.files.configMapRef.name",
                    f"no ConfigMap '{reference}' in namespace '{model.metadata.namespace or DEFAULT_NAMESPACE}'",
                )
            ]
        else:
            files, missing = files_from_config_map(model, config_map)
    rendered, findings = _render_model(model, server, files)
    return (None if missing else rendered), missing + findings
