"""YAML documents (or objects from the API server) to TritonServer/TritonModel, with findings."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from .modelconfig import ModelConfigError
from .resources import KINDS, ObjectMeta, TritonModel, TritonServer
from .validation import Finding

DEFAULT_NAMESPACE = "default"


def object_id(kind: str, metadata: ObjectMeta | Mapping[str, Any]) -> str:
    name = metadata.name if isinstance(metadata, ObjectMeta) else metadata.get("name", "?")
    namespace = metadata.namespace if isinstance(metadata, ObjectMeta) else metadata.get("namespace")
    return f"{kind}/{namespace or DEFAULT_NAMESPACE}/{name}"


def located(findings: Iterable[Finding], obj: str) -> list[Finding]:
    return [dataclasses.replace(finding, obj=obj) for finding in findings]


def _pydantic_findings(error: ValidationError) -> list[Finding]:
    """pydantic's errors as findings; a config error keeps the path into the config it names."""
    findings = []
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"]) or "(object)"
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, ModelConfigError):
            findings.append(Finding("error", cause.path, cause.message))
        else:
            findings.append(Finding("error", path, item["msg"].removeprefix("Value error, ")))
    return findings


def parse_resource(document: Mapping[str, Any]) -> tuple[TritonServer | TritonModel | None, list[Finding]]:
    """One custom resource, or the findings that say why it is not one."""
    kind = document.get("kind", "")
    try:
        return KINDS[kind].model_validate(document), []
    except ValidationError as error:
        return None, located(_pydantic_findings(error), object_id(kind, document.get("metadata") or {}))


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
