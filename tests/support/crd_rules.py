"""What kube-apiserver decodes and accepts in a CRD's schema, node by node, stricter than Python.

apiextensions.k8s.io/v1 decodes a schema into Go's JSONSchemaProps (`minimum` a float64,
`maxLength` an int64, `exclusiveMinimum` a bool) and then holds it to the structural-schema rules.
Python's `True == 1` lets a boolean pass for a number in jsonschema; here it never does. Each rule
returns the node's path and the API server's complaint in its own words where it has one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jsonschema
import re2

from tests.support.crd_check import json_schema

NUMBERS = ("minimum", "maximum", "multipleOf")
COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
BOOLEANS = (
    "exclusiveMinimum",
    "exclusiveMaximum",
    "nullable",
    "uniqueItems",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-embedded-resource",
)
TYPES = ("object", "array", "string", "integer", "number", "boolean")
# JSON Schema keywords apiextensions.k8s.io/v1 refuses in a structural schema (or that JSONSchemaProps lacks).
FORBIDDEN = ("$ref", "$schema", "$defs", "definitions", "id", "patternProperties", "dependencies", "additionalItems")
CHILDREN = ("properties", "items", "additionalProperties")
_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path (`.spec.properties.replicas`), the root first."""
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from nodes(child, f"{path}.properties.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from nodes(schema[key], f"{path}.{key}")


def schema_problems(schema: dict[str, Any]) -> list[str]:
    """What the API server would refuse (or keep but never enforce as written) in an openAPIV3Schema."""
    return [f"{path or '.'}: {problem}" for path, node in nodes(schema) for problem in node_problems(node)]


def node_problems(node: dict[str, Any]) -> list[str]:
    return [
        *_decoding_problems(node),
        *_structural_problems(node),
        *_value_problems(node),
    ]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _decoding_problems(node: dict[str, Any]) -> Iterator[str]:
    """The keywords' Go types: a wrong one fails the CRD's decoding (kubectl apply, helm install)."""
    for key in NUMBERS:
        if key in node and not _is_number(node[key]):
            yield f"{key}: {node[key]!r} is not a number"
    for key in COUNTS:
        if key in node and not (isinstance(node[key], int) and not isinstance(node[key], bool) and node[key] >= 0):
            yield f"{key}: {node[key]!r} is not a non-negative integer"
    for key in BOOLEANS:
        if key in node and not isinstance(node[key], bool):
            yield f"{key}: {node[key]!r} is not a boolean"
    if "required" in node and not (
        isinstance(node["required"], list) and all(isinstance(r, str) for r in node["required"])
    ):
        yield f"required: {node['required']!r} is not a list of names"
    if "enum" in node and not isinstance(node["enum"], list):
        yield f"enum: {node['enum']!r} is not a list"
    if "pattern" in node and not isinstance(node["pattern"], str):
        yield f"pattern: {node['pattern']!r} is not a string"


def _structural_problems(node: dict[str, Any]) -> Iterator[str]:
    """The structural-schema rules of apiextensions.k8s.io/v1."""
    for key in FORBIDDEN:
        if key in node:
            yield f"{key}: Forbidden: must not be used in a structural schema"
    for key in ("anyOf", "oneOf", "allOf", "not"):
        if key in node:
            yield f"{key}: a structural schema here takes no logical junctors"
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    if int_or_string and "type" in node:
        yield "type: Forbidden: must be empty if x-kubernetes-int-or-string is true"
    elif "type" not in node:
        if not (int_or_string or node.get("x-kubernetes-preserve-unknown-fields") is True):
            yield "type: Required value: must not be empty for specified fields"
    elif node["type"] not in TYPES:
        yield f"type: Unsupported value: {node['type']!r}"
    if node.get("type") == "array" and not isinstance(node.get("items"), dict):
        yield "items: Required value: must be specified"
    if "properties" in node and "additionalProperties" in node:
        yield "additionalProperties and properties are mutually exclusive"
    if node.get("additionalProperties") is False:
        yield "additionalProperties: Forbidden: must not be false (leave it out: unknown fields are pruned)"
    if node.get("uniqueItems") is True:
        yield "uniqueItems: Forbidden: cannot be set to true since the runtime complexity becomes quadratic"
    if node.get("x-kubernetes-preserve-unknown-fields") is False:
        yield "x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined"
    if node.get("exclusiveMinimum") is True and "minimum" not in node:
        yield "exclusiveMinimum: true without a minimum bounds nothing"
    if node.get("exclusiveMaximum") is True and "maximum" not in node:
        yield "exclusiveMaximum: true without a maximum bounds nothing"
    if node.get("x-kubernetes-list-type") == "map":
        yield from _list_map_problems(node)


def _list_map_problems(node: dict[str, Any]) -> Iterator[str]:
    items = node.get("items", {})
    keys = node.get("x-kubernetes-list-map-keys") or []
    if not keys:
        yield "x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
    if items.get("type") != "object":
        yield "x-kubernetes-list-type: Invalid value: map lists must have items of type object"
    for key in keys:
        field = items.get("properties", {}).get(key)
        if field is None:
            yield f"x-kubernetes-list-map-keys: {key!r} is not a property of the items"
        elif key not in items.get("required", []) and "default" not in field:
            yield f"x-kubernetes-list-map-keys: {key!r} must be required or have a default"


# A CEL string literal: r/R for raw, then '...' or "..." (a backslash escapes the next character).
_CEL_LITERAL = re.compile(r"""([rR]?)('(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")""")
# The escapes CEL's grammar has; anything else after a backslash fails the rule's compilation.
_CEL_ESCAPE = re.compile(r"""\\(?:[abfnrtv\\'"`?]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-3][0-7]{2})""")


def cel_escape_problems(rule: str) -> list[str]:
    """Escapes in a rule's plain (not raw) string literals that CEL's parser refuses: a regular
    expression's `\\.` in '...' is one (cel-python lets it through; the API server does not)."""
    problems = []
    for raw, literal in _CEL_LITERAL.findall(rule):
        if raw:
            continue
        leftover = _CEL_ESCAPE.sub("", literal[1:-1])
        if "\\" in leftover:
            problems.append(f"x-kubernetes-validations: {literal[:40]!r}... holds an escape CEL refuses: write r'...'")
    return problems


def _value_problems(node: dict[str, Any]) -> Iterator[str]:
    """Values that decode but cannot mean what they say: an unknown required name, a wrong-typed enum,
    a default the node itself refuses, a pattern Go's regexp (RE2) cannot compile, bounds that admit nothing."""
    for validation in node.get("x-kubernetes-validations", []):
        yield from cel_escape_problems(validation.get("rule", ""))
    properties = node.get("properties", {})
    if isinstance(node.get("required"), list) and not node.get("x-kubernetes-preserve-unknown-fields"):
        for name in node["required"]:
            if name not in properties:
                yield f"required: {name!r} names no property"
    expected = _PYTHON_TYPES.get(node.get("type", ""))
    for value in node.get("enum", []) if isinstance(node.get("enum"), list) else []:
        if expected and not (isinstance(value, expected) and (bool in expected or not isinstance(value, bool))):
            yield f"enum: {value!r} is not of type {node['type']}"
    if isinstance(node.get("pattern"), str):
        try:
            re2.compile(node["pattern"])
        except re2.error as error:
            yield f"pattern: {node['pattern']!r} does not compile as RE2 (Go's regexp): {error}"
    if "default" in node:
        try:
            jsonschema.validate(node["default"], json_schema(node))
        except jsonschema.ValidationError as error:
            yield f"default: {node['default']!r} is refused by its own node: {error.message}"
    for low, high in (("minimum", "maximum"), ("minLength", "maxLength"), ("minItems", "maxItems")):
        if _is_number(node.get(low)) and _is_number(node.get(high)) and node[low] > node[high]:
            yield f"{low} {node[low]} is above {high} {node[high]}: nothing is valid"
