"""The CRD files as kube-apiserver decodes them: JSONSchemaProps' Go types, the structural rules, and
every pydantic constraint the API can use turned into a schema the server takes with the same meaning.

Python's jsonschema reads `minimum: true` as 1 (`True == 1`); the API server refuses the whole CRD.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import celpy
import jsonschema
import kubernetes_validate
import pydantic
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tests.support.crd_check import json_schema
from tests.support.crd_rules import node_problems, nodes, schema_problems
from triton_operator.api.crd import NotStructural, structural_schema
from triton_operator.api.model import MODEL_NAME_PATTERN, TritonModelSpec
from triton_operator.api.pod_resources import LABEL_VALUE_PATTERN
from triton_operator.api.rollout_spec import PERCENT_PATTERN
from triton_operator.api.types import BYTE_QUANTITY_PATTERN, QUANTITY_PATTERN, ApiModel

CRD_FILES = sorted((ROOT / "crds").glob("*.yaml")) + sorted((ROOT / "charts/triton-operator/crds").glob("*.yaml"))
KUBERNETES_VALIDATE = Path(sys.executable).with_name("kubernetes-validate")


def _schema(path: Path) -> dict[str, Any]:
    crd = yaml.safe_load(path.read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def test_kubernetes_validate_strict_accepts_every_crd_file() -> None:
    """The CRD objects themselves against Kubernetes' own CustomResourceDefinition schema (strict: no
    unknown field), the check `kubectl apply -f crds/` and `helm install` meet first on a real cluster."""
    result = subprocess.run(
        [str(KUBERNETES_VALIDATE), "--strict", *map(str, CRD_FILES)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("passed") == len(CRD_FILES) == 4


@pytest.mark.parametrize("path", CRD_FILES, ids=[str(p.relative_to(ROOT)) for p in CRD_FILES])
def test_every_schema_node_is_what_the_api_server_decodes(path: Path) -> None:
    assert schema_problems(_schema(path)) == []


@pytest.mark.parametrize("path", CRD_FILES[:2], ids=[p.name for p in CRD_FILES[:2]])
def test_every_cel_rule_compiles(path: Path) -> None:
    environment = celpy.Environment()
    rules = [rule["rule"] for _, node in nodes(_schema(path)) for rule in node.get("x-kubernetes-validations", [])]
    assert rules
    for rule in rules:
        environment.compile(rule)


# Each rule of the checker with a node it must refuse: the checker itself can fail.
REFUSED = [
    ({"type": "number", "minimum": True, "exclusiveMinimum": True}, "minimum: True is not a number"),
    ({"type": "number", "minimum": 0, "exclusiveMinimum": 0}, "exclusiveMinimum: 0 is not a boolean"),
    ({"type": "number", "exclusiveMinimum": True}, "without a minimum"),
    ({"type": "number", "maximum": "5"}, "maximum: '5' is not a number"),
    ({"type": "string", "maxLength": 2.5}, "maxLength: 2.5 is not a non-negative integer"),
    ({"type": "array", "items": {"type": "string"}, "minItems": False}, "minItems: False"),
    ({"type": "object", "nullable": "yes"}, "nullable: 'yes' is not a boolean"),
    ({"properties": {}}, "type: Required value"),
    ({"type": "int"}, "type: Unsupported value"),
    ({"type": "array"}, "items: Required value"),
    ({"type": "string", "x-kubernetes-int-or-string": True}, "must be empty if x-kubernetes-int-or-string"),
    ({"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}, "mutually exclusive"),
    ({"type": "object", "additionalProperties": False}, "must not be false"),
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "quadratic"),
    ({"type": "object", "x-kubernetes-preserve-unknown-fields": False}, "must be true or undefined"),
    ({"type": "object", "$ref": "#/x"}, "$ref: Forbidden"),
    ({"type": "object", "anyOf": [{"type": "string"}]}, "logical junctors"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}, "'b' names no property"),
    ({"type": "string", "enum": ["a", 1]}, "enum: 1 is not of type string"),
    ({"type": "integer", "enum": [True]}, "enum: True is not of type integer"),
    ({"type": "integer", "minimum": 1, "default": 0}, "default: 0 is refused by its own node"),
    ({"type": "string", "pattern": "^(?=a)b$"}, "does not compile as RE2"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, "nothing is valid"),
    ({"type": "string", "x-kubernetes-validations": [{"rule": r"self.matches('^a\.b$')"}]}, "escape CEL refuses"),
    (
        {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"], "items": {
            "type": "object", "properties": {"name": {"type": "string"}}}},
        "'name' must be required or have a default",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("node", "complaint"), REFUSED, ids=[c for _, c in REFUSED])
def test_the_checker_refuses(node: dict[str, Any], complaint: str) -> None:
    assert any(complaint in problem for problem in node_problems(node)), node_problems(node)


@pytest.mark.parametrize(
    "rule",
    [r"self.matches(r'^a\.b$')", r"self.matches('^a\\.b$')", "self == 'it\\'s'", r"self.startsWith('\x41\n')"],
)
def test_cel_literals_that_compile_pass(rule: str) -> None:
    assert node_problems({"type": "string", "x-kubernetes-validations": [{"rule": rule}]}) == []


def test_the_crds_before_the_fix_are_refused() -> None:
    """The shape that shipped: an optional field with `gt` visited twice turned its minimum into `true`."""
    shipped = {"exclusiveMinimum": True, "type": "number", "minimum": True}
    assert schema_problems({"type": "object", "properties": {"timeoutSeconds": shipped}}) == [
        ".properties.timeoutSeconds: minimum: True is not a number"
    ]


def test_an_optional_exclusive_bound_keeps_its_number() -> None:
    load_timeout = structural_schema(TritonModelSpec)["properties"]["loadTimeoutSeconds"]
    assert load_timeout["minimum"] == 0 and load_timeout["minimum"] is not False
    assert load_timeout["exclusiveMinimum"] is True and load_timeout["type"] == "integer"


# A property-based check over every constraint pydantic can put on a field, alone and combined, in
# the shapes the API uses them (optional, in lists and maps, nested models), so the next new field
# cannot bring a decoding error back.
PATTERNS = [MODEL_NAME_PATTERN, PERCENT_PATTERN, QUANTITY_PATTERN, BYTE_QUANTITY_PATTERN, LABEL_VALUE_PATTERN]
small = st.integers(min_value=-20, max_value=20)
# Values on and beside every bound, without the float tolerances in which pydantic and Go's remainder differ.
halves = st.integers(min_value=-50, max_value=50).map(lambda n: n / 2)


def _some(bounds: dict[str, int], draw: st.DrawFn) -> dict[str, int]:
    """None, either or both of a lower and an upper bound that leave something valid between them."""
    return {key: value for key, value in bounds.items() if draw(st.booleans())}


def _sizes(draw: st.DrawFn, most: int) -> dict[str, int]:
    low = draw(st.integers(0, most))
    return {"min_length": low, "max_length": draw(st.integers(low, most))}


@st.composite
def numbers(draw: st.DrawFn) -> tuple[Any, dict[str, Any]]:
    kind = draw(st.sampled_from([int, float]))
    low = draw(small)
    bounds = _some({draw(st.sampled_from(["gt", "ge"])): low, draw(st.sampled_from(["lt", "le"])): low + 2}, draw)
    if draw(st.booleans()):
        bounds["multiple_of"] = draw(st.integers(min_value=1, max_value=7))
    return Annotated[kind, pydantic.Field(**bounds)], bounds


@st.composite
def strings(draw: st.DrawFn) -> tuple[Any, dict[str, Any]]:
    bounds = _some(_sizes(draw, 20), draw)
    if draw(st.booleans()):
        bounds["pattern"] = draw(st.sampled_from(PATTERNS))
    return Annotated[str, pydantic.StringConstraints(**bounds)], bounds


@st.composite
def literals(draw: st.DrawFn) -> tuple[Any, dict[str, Any]]:
    values = draw(
        st.one_of(
            st.lists(st.text("abcXYZ_-", min_size=1, max_size=6), min_size=1, max_size=4, unique=True),
            st.lists(small, min_size=1, max_size=4, unique=True),
            st.just([True]),
        )
    )
    return Literal[tuple(values)], {}


scalars = st.one_of(numbers(), strings(), literals(), st.just((bool, {})))


@st.composite
def fields(draw: st.DrawFn, depth: int = 2) -> Any:
    """A field's annotation, built of the scalars above in lists, maps, optionals and nested models."""
    shapes = ["scalar", "optional"] + (["list", "map", "model"] if depth else [])
    shape = draw(st.sampled_from(shapes))
    if shape == "scalar":
        return draw(scalars)[0]
    if shape == "optional":
        return draw(fields(depth)) | None
    if shape == "list":
        sizes = _some(_sizes(draw, 5), draw)
        return Annotated[list[draw(fields(depth - 1))], pydantic.Field(**sizes)]  # type: ignore[misc]
    if shape == "map":
        return dict[str, draw(fields(depth - 1))]  # type: ignore[misc]
    return draw(models(depth - 1))


@st.composite
def models(draw: st.DrawFn, depth: int = 2) -> type[ApiModel]:
    names = draw(st.lists(st.sampled_from(["alpha", "beta_count", "gamma", "delta_x"]), min_size=1, unique=True))
    definitions = {}
    for name in names:
        annotation = draw(fields(depth))
        definitions[name] = (annotation, None) if draw(st.booleans()) else (annotation, ...)
    return pydantic.create_model(f"Generated{depth}", __base__=ApiModel, **definitions)  # type: ignore[no-any-return,call-overload]


def _crd_of(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Thing", "plural": "things"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}],
        },
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=models())
def test_every_generated_model_gives_a_schema_the_api_server_decodes(model: type[ApiModel]) -> None:
    schema = structural_schema(model)
    assert schema_problems(schema) == []
    kubernetes_validate.validate(_crd_of(schema), "1.35", strict=True)


@settings(max_examples=300, deadline=None)
@given(field=numbers(), value=st.one_of(small, halves))
def test_a_bound_means_in_the_crd_what_it_means_to_pydantic(field: tuple[Any, dict[str, Any]], value: float) -> None:
    annotation, bounds = field
    model = pydantic.create_model("Bounded", __base__=ApiModel, value=(annotation, ...))
    node = structural_schema(model)["properties"]["value"]
    assert node_problems(node) == []
    try:
        model(value=value)
        accepted = True
    except pydantic.ValidationError:
        accepted = False
    if node["type"] == "integer" and not float(value).is_integer():
        return  # pydantic refuses 2.5 for an int; the API server's "integer" type does the same (tested above)
    try:
        jsonschema.validate(value, json_schema(node))
        refused = False
    except jsonschema.ValidationError:
        refused = True
    assert accepted != refused, (bounds, value, node)


@pytest.mark.parametrize(
    "annotation",
    [int | str, Literal[1, "a"], list[int | str]],
    ids=["union", "mixed literal", "union in a list"],
)
def test_a_field_of_two_types_is_refused_by_the_writer(annotation: Any) -> None:
    """A node the API server cannot type: the writer says so, naming the field, instead of writing it."""
    model = pydantic.create_model("Mixed", __base__=ApiModel, odd_field=(annotation, ...))
    with pytest.raises(NotStructural, match="oddField"):
        structural_schema(model)
