"""CustomResourceDefinitions generated from the pydantic models (and Triton's proto inside them).

pydantic's JSON schema is turned into a Kubernetes structural schema: `$defs` inlined,
`anyOf [X, null]` turned into X (the API server prunes nulls of non-nullable fields), titles and
defaults dropped (the operator applies defaults, so the API server never writes into what a
GitOps tool compares). One default is kept: a TritonServer's `spec.replicas`, which its scale
subresource reads and cannot do without.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .model import TritonModelSpec
from .server import TritonServerSpec
from .status_fields import TritonModelStatus, TritonServerStatus
from .types import GROUP, VERSION

_DROPPED_KEYS = {"title", "default", "examples"}


class NotStructural(ValueError):
    """The pydantic model produced a schema Kubernetes cannot take as structural."""


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    definitions = schema.pop("$defs", {})
    return _structural(schema, definitions, path=model.__name__)


def _structural(node: dict[str, Any], definitions: dict[str, Any], path: str) -> dict[str, Any]:
    """One node in OpenAPI's words, its children after it: each node is converted once, from JSON Schema."""
    node = _resolved(node, definitions, path)
    if node.get("x-kubernetes-int-or-string"):
        kept = ("description", "pattern", "maxLength", "x-kubernetes-int-or-string", "x-kubernetes-validations")
        return {key: node[key] for key in kept if key in node}
    node = _openapi_keywords(node)
    if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        raise NotStructural(f"{path}: a node without a type (a mix of types?) is not a structural schema")
    if node.get("properties"):
        node["properties"] = {
            name: _structural(child, definitions, f"{path}.{name}") for name, child in node["properties"].items()
        }
    else:
        node.pop("properties", None)  # the API server stores `properties: {}` as nothing: written as it is kept
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            node[key] = _structural(node[key], definitions, f"{path}[]")
    return node


def _resolved(node: dict[str, Any], definitions: dict[str, Any], path: str) -> dict[str, Any]:
    """The node with its `$ref` and its `anyOf [X, null]` merged in, still in JSON Schema's words: the
    node's own keys (a field's description) win over the definition's."""
    node = dict(node)
    if "$ref" in node:
        target = definitions[node.pop("$ref").rsplit("/", 1)[-1]]
        node = {**_resolved(target, definitions, path), **node}
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        options = [option for option in node.pop("anyOf") if option != {"type": "null"}]
        if len(options) != 1:
            raise NotStructural(f"{path}: a union of {len(options)} types is not a structural schema")
        node = {**_resolved(options[0], definitions, path), **node}
    return node


def _openapi_keywords(node: dict[str, Any]) -> dict[str, Any]:
    """JSON Schema 2020's keywords as OpenAPI v3.0 (what apiextensions.k8s.io/v1 decodes) has them.

    Idempotent: an exclusive bound already a boolean stays as it is, so no second visit can turn a
    number into `true` (the API server refuses a CRD whose `minimum` is not a number)."""
    node = {key: value for key, value in node.items() if key not in _DROPPED_KEYS}
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if node.get("additionalProperties") is False:
        del node["additionalProperties"]
    for exclusive, inclusive, stricter in (("exclusiveMinimum", "minimum", max), ("exclusiveMaximum", "maximum", min)):
        bound = node.get(exclusive)
        if isinstance(bound, bool) or bound is None:
            continue
        if inclusive in node and stricter(node[inclusive], bound) != bound:
            del node[exclusive]  # the inclusive bound is the tighter one
        else:
            node[inclusive], node[exclusive] = bound, True
    return node


def _ready_column() -> dict[str, Any]:
    return {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'}


def _age_column() -> dict[str, Any]:
    return {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


# The scale subresource of a TritonServer, which `kubectl scale`, an HPA and KEDA write through.
SCALE_SUBRESOURCE = {
    "specReplicasPath": ".spec.replicas",
    "statusReplicasPath": ".status.replicas",
    "labelSelectorPath": ".status.selector",
}


def _with_replicas_default(spec_schema: dict[str, Any]) -> dict[str, Any]:
    """The API server serves no scale of an object without spec.replicas (an HPA could not scale it), and a
    GitOps repository leaves replicas out when an autoscaler sets them: the API server stores the operator's
    own default, in a spec it makes if there is none."""
    replicas = TritonServerSpec.model_fields["replicas"].default
    properties = {
        **spec_schema["properties"],
        "replicas": {**spec_schema["properties"]["replicas"], "default": replicas},
    }
    return {**spec_schema, "default": {}, "properties": properties}


def _crd(
    kind: str,
    plural: str,
    short_names: list[str],
    spec: type[BaseModel],
    status: type[BaseModel],
    columns: list[dict[str, Any]],
    spec_required: bool,
    scale: bool = False,
) -> dict[str, Any]:
    """One CRD with the status subresource (and the scale subresource if `scale`), printer columns and short names."""
    spec_schema = structural_schema(spec)
    spec_schema["description"] = f"Desired state of the {kind}."
    if scale:
        spec_schema = _with_replicas_default(spec_schema)
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
                    "subresources": {"status": {}, **({"scale": SCALE_SUBRESOURCE} if scale else {})},
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
            {
                "name": "Desired",
                "type": "integer",
                "jsonPath": ".spec.replicas",
                "description": "Pods asked for (by the spec or its autoscaler).",
            },
            {
                "name": "Serving",
                "type": "integer",
                "jsonPath": ".status.readyReplicas",
                "description": "Pods with every model loaded, in the Service.",
            },
            {
                "name": "Metric",
                "type": "number",
                "jsonPath": ".status.autoscaling.current",
                "description": "The autoscaler's metric, averaged over the pods.",
            },
            {
                "name": "Target",
                "type": "integer",
                "jsonPath": ".status.autoscaling.target",
                "description": "The autoscaler's target for it, per pod.",
            },
            {"name": "Autoscaler", "type": "string", "jsonPath": ".status.autoscaling.autoscaler", "priority": 1},
            {"name": "Shm", "type": "integer", "jsonPath": ".status.sharedMemoryBytes", "priority": 1},
            _age_column(),
        ],
        spec_required=False,
        scale=True,
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
            {
                "name": "Rollout",
                "type": "string",
                "jsonPath": ".status.rollout.phase",
                "description": "Canary strategy: Stable, Progressing, Baking or RolledBack.",
            },
            {
                "name": "Serving",
                "type": "string",
                "jsonPath": ".status.rollout.stableRevision",
                "priority": 1,
                "description": "The revision every pod that is not a canary runs.",
            },
            _age_column(),
        ],
        spec_required=True,
    )
    return {"tritonservers.yaml": server, "tritonmodels.yaml": model}
