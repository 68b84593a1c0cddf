"""YAML documents (or objects from the API server) to TritonServer/TritonModel, with findings."""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from .config_json import ModelConfigError, parse_model_config
from .crd import structural_schema
from .findings import Finding
from .object_names import model_name_problem, namespace_problem, server_name_problem
from .resources import KINDS, ObjectMeta, TritonModel, TritonServer
from .security import pod_security_findings
from .validation import validate_model_config

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


def _close_field(kind: str, loc: tuple[int | str, ...]) -> str:
    """The field of the object at loc[:-1] that the unknown field loc[-1] most likely meant, or ""."""
    return next(iter(difflib.get_close_matches(str(loc[-1]), _field_names(kind, loc[:-1]), n=1)), "")


def _server_only(kind: str, loc: tuple[int | str, ...]) -> str:
    """Why a model's inline server does not take a field a TritonServer's spec has, or "" for another field."""
    if kind != "TritonModel" or tuple(loc[:2]) != ("spec", "server"):
        return ""
    if loc[-1] not in _field_names("TritonServer", ("spec", *loc[2:-1])):
        return ""
    return (
        f"a TritonModel's own server takes sizes, resources and model settings only, and '{loc[-1]}' shapes the "
        "pod beyond them (its image, Triton's flags, containers, service account, security, scheduling, volumes, "
        "Secrets or network), which is a TritonServer's to set: use a TritonServer (serverRef) for this"
    )


def _unknown_field(kind: str, loc: tuple[int | str, ...]) -> str:
    """The same advice a typo inside spec.config gets: a close match, or what the object has; a TritonServer's
    field in a model's inline server is said to be one."""
    if server_only := _server_only(kind, loc):
        return server_only
    hint = _close_field(kind, loc)
    return (
        f"unknown field; did you mean '{hint}'?"
        if hint
        else f"unknown field; known here: {', '.join(_field_names(kind, loc[:-1])) or 'none'}"
    )


def _not_an_object(kind: str, loc: tuple[int | str, ...], value: Any) -> str:
    """An object's field given something else (serverRef: triton): what to write instead."""
    fields = _field_names(kind, loc)
    if "name" in fields and isinstance(value, str):
        return f"expected an object, got '{value}': write {loc[-1]}: {{name: {value}}}"
    return f"expected an object ({', '.join(fields)}), got {type(value).__name__}"


def _pydantic_findings(kind: str, error: ValidationError) -> list[Finding]:
    """pydantic's errors as findings; a config error keeps the path into the config it names. A misspelt
    field is one error (unknown field, did you mean), not a second one for the field it should have been."""
    items = error.errors()
    meant = {
        (*item["loc"][:-1], hint)
        for item in items
        if item["type"] == "extra_forbidden" and (hint := _close_field(kind, item["loc"]))
    }
    findings = []
    for item in items:
        path = ".".join(str(part) for part in item["loc"]) or "(object)"
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, ModelConfigError):
            findings += [Finding("error", where, message) for where, message in cause.problems]
        elif item["type"] == "extra_forbidden":
            findings.append(Finding("error", path, _unknown_field(kind, item["loc"])))
        elif item["type"] == "missing" and tuple(item["loc"]) in meant:
            continue
        elif item["type"] in ("model_type", "model_attributes_type", "dict_type"):
            findings.append(Finding("error", path, _not_an_object(kind, item["loc"], item["input"])))
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


def _name_findings(kind: str, document: Mapping[str, Any]) -> list[Finding]:
    """What the API server would refuse of the object's name, or of the names of the objects named after it."""
    metadata, spec = document.get("metadata"), document.get("spec")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        return []  # the schema says what is wrong with it
    name, namespace = metadata["name"], metadata.get("namespace")
    problems = [("metadata.namespace", namespace_problem(namespace) if isinstance(namespace, str) else "")]
    if kind == "TritonServer":
        problems.append(("metadata.name", server_name_problem(name)))
    else:
        problems.append(("metadata.name", model_name_problem(name)))
        if isinstance(spec, Mapping) and spec.get("server") is not None:
            problems.append(("metadata.name", server_name_problem(name, "a model with its own server: its name")))
    return [Finding("error", path, problem) for path, problem in problems if problem]


def parse_resource(document: Mapping[str, Any]) -> tuple[TritonServer | TritonModel | None, list[Finding]]:
    """One custom resource, or the findings that say why it is not one."""
    kind = document.get("kind", "")
    findings = _name_findings(kind, document)
    try:
        resource = KINDS[kind].model_validate(document)
        if isinstance(resource, TritonServer):  # what the pod may not be, seen in the opaque Kubernetes objects
            findings += pod_security_findings(resource.spec)
    except ValidationError as error:
        findings += _pydantic_findings(kind, error)
        if kind == "TritonModel":
            findings += _config_findings(document)
        resource = None
    return (None if findings else resource), located(findings, object_id(kind, document.get("metadata")))


def parse_resources(
    documents: Iterable[Mapping[str, Any]],
) -> tuple[list[TritonServer], list[TritonModel], list[Finding]]:
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
