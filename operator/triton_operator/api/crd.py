"""CustomResourceDefinitions generated from the pydantic models (and Triton's proto inside them).

pydantic's JSON schema is turned into a Kubernetes structural schema: `$defs` inlined,
`anyOf [X, null]` turned into X (the API server prunes nulls of non-nullable fields), titles and
defaults dropped (the operator applies defaults, so the API server never writes into what a
GitOps tool compares).
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from .model import TritonModelSpec
from .server import TritonServerSpec
from .status import TritonModelStatus, TritonServerStatus
from .types import GROUP, VERSION

_DROPPED_KEYS = {"title", "default", "examples"}


class NotStructural(ValueError):
    """The pydantic model produced a schema Kubernetes cannot take as structural."""


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    definitions = schema.pop("$defs", {})
    return _structural(schema, definitions, path=model.__name__)


def _structural(node: dict[str, Any], definitions: dict[str, Any], path: str) -> dict[str, Any]:
    node = copy.deepcopy(node)
    if "$ref" in node:
        target = definitions[node.pop("$ref").rsplit("/", 1)[-1]]
        node = {**target, **node}
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        options = [option for option in node.pop("anyOf") if option != {"type": "null"}]
        if len(options) != 1:
            raise NotStructural(f"{path}: a union of {len(options)} types is not a structural schema")
        node = {**_structural(options[0], definitions, path), **node}
    if node.get("x-kubernetes-int-or-string"):
        kept = ("description", "pattern", "x-kubernetes-int-or-string", "x-kubernetes-validations")
        return {key: node[key] for key in kept if key in node}
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if node.get("additionalProperties") is False:
        del node["additionalProperties"]
    for key in _DROPPED_KEYS:
        node.pop(key, None)
    if "exclusiveMinimum" in node:
        node["minimum"], node["exclusiveMinimum"] = node["exclusiveMinimum"], True
    if "properties" in node:
        node["properties"] = {
            name: _structural(child, definitions, f"{path}.{name}") for name, child in node["properties"].items()
        }
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            node[key] = _structural(node[key], definitions, f"{path}[]")
    return node


def _ready_column() -> dict[str, Any]:
    return {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'}


def _age_column() -> dict[str, Any]:
    return {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _crd(
    kind: str,
    plural: str,
    short_names: list[str],
    spec: type[BaseModel],
    status: type[BaseModel],
    columns: list[dict[str, Any]],
    spec_required: bool,
) -> dict[str, Any]:
    """One CRD with the status subresource, printer columns and short names."""
    spec_schema = structural_schema(spec)
    spec_schema["description"] = f"Desired state of the {kind}."
    status_schema = structural_schema(status)
    status_schema["description"] = f"Observed state of the {kind}, written by the operator."
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["triton"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            **({"required": ["spec"]} if spec_required else {}),
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def custom_resource_definitions() -> dict[str, dict[str, Any]]:
    """Both CRDs, keyed by the file name they are written to."""
    server = _crd(
        "TritonServer",
        "tritonservers",
        ["ts", "tserver"],
        TritonServerSpec,
        TritonServerStatus,
        [
            _ready_column(),
            {"name": "Replicas", "type": "string", "jsonPath": ".status.readyReplicas"},
            {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
            {"name": "Shm", "type": "integer", "jsonPath": ".status.sharedMemoryBytes", "priority": 1},
            _age_column(),
        ],
        spec_required=False,
    )
    model = _crd(
        "TritonModel",
        "tritonmodels",
        ["tm", "tmodel"],
        TritonModelSpec,
        TritonModelStatus,
        [
            _ready_column(),
            {"name": "Server", "type": "string", "jsonPath": ".status.server"},
            {"name": "Replicas", "type": "string", "jsonPath": ".status.replicas"},
            {"name": "Config", "type": "string", "jsonPath": ".status.configHash"},
            _age_column(),
        ],
        spec_required=True,
    )
    return {"tritonservers.yaml": server, "tritonmodels.yaml": model}
