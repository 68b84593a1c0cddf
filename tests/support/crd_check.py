"""What a Kubernetes API server checks on a custom resource, done here: the CRD's OpenAPI schema
(structural, with int-or-string and preserve-unknown-fields), list-map keys, and CEL rules.

There is no API server on this machine; this keeps kmock's and the tests' leniency from hiding
a CR the real one would refuse.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def crd_schema(kind: str) -> dict[str, Any]:
    for path in (ROOT / "crds").glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["kind"] == kind:
            return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    raise KeyError(kind)


def json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI v3 (Kubernetes flavour) to JSON Schema: unknown fields are refused unless preserved."""
    if node.get("x-kubernetes-int-or-string"):
        return {"type": ["integer", "string"], **({"pattern": node["pattern"]} if "pattern" in node else {})}
    result: dict[str, Any] = {}
    for key in (
        "type",
        "enum",
        "minimum",
        "maximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "required",
        "format",
    ):
        if key in node:
            result[key] = node[key]
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if node.get(exclusive) is True and bound in result:
            result[exclusive] = result.pop(bound)
    if "format" in result and result["format"] not in ("int32", "int64", "float", "double"):
        result.pop("format")
    if "properties" in node:
        result["properties"] = {name: json_schema(child) for name, child in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            result["additionalProperties"] = False
    elif "additionalProperties" in node:
        result["additionalProperties"] = json_schema(node["additionalProperties"])
    if "items" in node:
        result["items"] = json_schema(node["items"])
    if node.get("nullable") and "type" in result:
        result["type"] = [result["type"], "null"]
    return result


def _list_map_errors(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    errors = []
    if isinstance(value, dict):
        for name, child in value.items():
            child_schema = schema.get("properties", {}).get(name) or (
                schema.get("additionalProperties") if isinstance(schema.get("additionalProperties"), dict) else None
            )
            if child_schema:
                errors += _list_map_errors(child_schema, child, f"{path}.{name}")
    elif isinstance(value, list) and "items" in schema:
        if schema.get("x-kubernetes-list-type") == "map":
            keys = [tuple(item.get(k) for k in schema["x-kubernetes-list-map-keys"]) for item in value]
            if len(set(keys)) != len(keys):
                errors.append(f"{path}: duplicate entries for list-map keys {schema['x-kubernetes-list-map-keys']}")
        for index, item in enumerate(value):
            errors += _list_map_errors(schema["items"], item, f"{path}[{index}]")
    return errors


@functools.cache
def _program(rule: str) -> Any:
    environment = celpy.Environment()
    return environment.program(environment.compile(rule))


def _cel_errors(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    errors = []
    for validation in schema.get("x-kubernetes-validations", []):
        result = _program(validation["rule"]).evaluate({"self": celpy.json_to_cel(value)})
        if result is not True and not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            errors.append(f"{path}: {validation['message']}")
    if isinstance(value, dict):
        for name, child in value.items():
            child_schema = schema.get("properties", {}).get(name)
            if child_schema is None and isinstance(schema.get("additionalProperties"), dict):
                child_schema = schema["additionalProperties"]
            if child_schema:
                errors += _cel_errors(child_schema, child, f"{path}.{name}")
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            errors += _cel_errors(schema["items"], item, f"{path}[{index}]")
    return errors


def crd_errors(document: dict[str, Any]) -> list[str]:
    """Every reason the API server would refuse this CR (empty when it would accept it)."""
    schema = crd_schema(document["kind"])
    validator = jsonschema.Draft202012Validator(json_schema(schema))
    errors = [
        f"{'.'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}"
        for error in validator.iter_errors(document)
    ]
    if errors:
        return errors  # CEL runs only on schema-valid objects, as in the API server
    return _list_map_errors(schema, document, "") + _cel_errors(schema, document, "")
