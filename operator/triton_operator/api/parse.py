"""YAML documents (or objects from the API server) to TritonServer/TritonModel, with findings."""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from .crd import structural_schema
from .modelconfig import ModelConfigError, parse_model_config
from .resources import KINDS, ObjectMeta, TritonModel, TritonServer
from .validation import Finding, validate_model_config

DEFAULT_NAMESPACE = "default"


def object_id(kind: str, metadata: ObjectMeta | Any) -> str:
    """Kind/namespace/name; metadata read from a file may be anything, and still names the object as well as it can."""
    if isinstance(metadata, ObjectMeta):
        name, namespace = metadata.name, metadata.namespace
    elif isinstance(metadata, Mapping):
        name, namespace = metadata.get("name") or "?", metadata.get("namespace")
    else:
        name, namespace = "?", None
    return f"{kind}/{namespace or DEFAULT_NAMESPACE}/{name}"


def located(findings: Iterable[Finding], obj: str) -> list[Finding]:
    return [dataclasses.replace(finding, obj=obj) for finding in findings]


@functools.cache
def _schema(kind: str) -> dict[str, Any]:
    return structural_schema(KINDS[kind])


def _field_names(kind: str, loc: tuple[int | str, ...]) -> list[str]:
    """The fields the schema allows at `loc` in a resource of `kind` (its wire names)."""
    node = _schema(kind)
    for part in loc:
        if isinstance(part, int):
            node = node.get("items", {})
        else:
            node = node.get("properties", {}).get(part) or node.get("additionalProperties") or {}
    return list(node.get("properties", {}))


def _unknown_field(kind: str, loc: tuple[int | str, ...]) -> str:
    """The same advice a typo inside spec.config gets: a close match, or what the object has."""
    known = _field_names(kind, loc[:-1])
    hint = difflib.get_close_matches(str(loc[-1]), known, n=1)
    return f"unknown field; did you mean '{hint[0]}'?" if hint else f"unknown field; known here: {', '.join(known) or 'none'}"


def _pydantic_findings(kind: str, error: ValidationError) -> list[Finding]:
    """pydantic's errors as findings; a config error keeps the path into the config it names."""
    findings = []
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"]) or "(object)"
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, ModelConfigError):
            findings += [Finding("error", where, message) for where, message in cause.problems]
        elif item["type"] == "extra_forbidden":
            findings.append(Finding("error", path, _unknown_field(kind, item["loc"])))
        else:
            findings.append(Finding("error", path, item["msg"].removeprefix("Value error, ")))
    return findings


def _config_findings(document: Mapping[str, Any]) -> list[Finding]:
    """Triton's rules on what parses of a refused model's config, so its errors come in one run, not in rounds."""
    spec = document.get("spec")
    config = spec.get("config") if isinstance(spec, Mapping) else None
    if not isinstance(config, dict) or not config:
        return []
    try:
        parsed = parse_model_config(config)
    except ModelConfigError as error:
        parsed = error.partial
    return validate_model_config(parsed) if parsed is not None else []


def parse_resource(document: Mapping[str, Any]) -> tuple[TritonServer | TritonModel | None, list[Finding]]:
    """One custom resource, or the findings that say why it is not one."""
    kind = document.get("kind", "")
    try:
        return KINDS[kind].model_validate(document), []
    except ValidationError as error:
        findings = _pydantic_findings(kind, error)
        if kind == "TritonModel":
            findings += _config_findings(document)
        return None, located(findings, object_id(kind, document.get("metadata")))


def parse_resources(documents: Iterable[Mapping[str, Any]]) -> tuple[list[TritonServer], list[TritonModel], list[Finding]]:
    servers: list[TritonServer] = []
    models: list[TritonModel] = []
    findings: list[Finding] = []
    for document in documents:
        resource, found = parse_resource(document)
        findings += found
        if isinstance(resource, TritonServer):
            servers.append(resource)
        elif resource is not None:
            models.append(resource)
    return servers, models, findings
