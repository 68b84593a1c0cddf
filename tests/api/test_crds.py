"""The CRDs are generated from the API, structural, small enough for client-side apply, and the
examples pass them (schema and CEL) as a real API server would check them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, example_documents
from tests.support.crd_check import crd_errors
from triton_operator.api.parse import parse_resources
from triton_operator.api.resources import is_custom_resource
from triton_operator.cli import main

CRD_FILES = sorted((ROOT / "crds").glob("*.yaml"))


def test_crds_check_is_clean_in_the_repository() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "triton_operator.cli", "crds", "--check", "--root", str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_crds_check_fails_with_a_diff_on_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for directory in ("crds", "charts/triton-operator/crds"):
        shutil.copytree(ROOT / directory, tmp_path / directory)
    edited = tmp_path / "charts/triton-operator/crds/tritonmodels.yaml"
    edited.write_text(edited.read_text().replace("shortNames:", "shortNames:\n      - stale", 1))
    assert main(["crds", "--check", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert "-      - stale" in out.out and "crds drifted" in out.err.lower()
    assert main(["crds", "--root", str(tmp_path)]) == 0
    assert main(["crds", "--check", "--root", str(tmp_path)]) == 0


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = []
    if isinstance(node, dict):
        found.append((path, node))
        for key, value in node.items():
            found += _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _walk(value, f"{path}[{index}]")
    return found


# The defaults the API server writes into a TritonServer: the scale subresource needs spec.replicas.
KEPT_DEFAULTS = {"TritonServer": {".properties.spec": {}, ".properties.spec.properties.replicas": 1}}


@pytest.mark.parametrize("path", CRD_FILES, ids=[p.name for p in CRD_FILES])
def test_crd_is_structural_and_small(path: Path) -> None:
    assert path.stat().st_size < 256 * 1024, "client-side kubectl apply stores the whole CRD in an annotation"
    crd = yaml.safe_load(path.read_text())
    version = crd["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    defaults = {}
    for where, node in _walk(schema):
        assert not {"$ref", "anyOf", "oneOf", "allOf", "$defs", "title", "const"} & set(node), where
        if "default" in node and not where.endswith(".properties"):
            defaults[where] = node["default"]
        if where.endswith(".properties") or where.endswith("x-kubernetes-validations"):
            continue
        if "properties" in node or "items" in node or node.get("type"):
            assert node.get("type") in ("object", "array", "string", "integer", "number", "boolean"), where
    for name, field in schema["properties"]["spec"]["properties"].items():
        assert field.get("description") or field.get("type") == "object", f"spec.{name} needs a description"
    kind = crd["spec"]["names"]["kind"]
    assert defaults == KEPT_DEFAULTS.get(kind, {})
    assert version["subresources"]["status"] == {}
    assert crd["spec"]["names"]["shortNames"]


def test_a_triton_server_scales_through_its_scale_subresource() -> None:
    """`kubectl scale`, an HPA and KEDA read and write spec.replicas there; the selector names the pods."""
    crd = yaml.safe_load((ROOT / "crds/tritonservers.yaml").read_text())
    assert crd["spec"]["versions"][0]["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    model = yaml.safe_load((ROOT / "crds/tritonmodels.yaml").read_text())
    assert "scale" not in model["spec"]["versions"][0]["subresources"]


def test_printer_columns() -> None:
    columns = {}
    for path in CRD_FILES:
        crd = yaml.safe_load(path.read_text())
        columns[crd["spec"]["names"]["kind"]] = {
            c["name"]: (c["jsonPath"], c.get("priority", 0))
            for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]
        }
    assert list(columns["TritonModel"]) == ["Ready", "Server", "Replicas", "Config", "Rollout", "Serving", "Age"]
    assert columns["TritonModel"]["Rollout"] == (".status.rollout.phase", 0)
    server = columns["TritonServer"]
    assert next(iter(server)) == "Ready" and list(server)[-1] == "Age"
    assert server["Desired"] == (".spec.replicas", 0) and server["Serving"] == (".status.readyReplicas", 0)
    assert server["Metric"] == (".status.autoscaling.current", 0) and server["Target"] == (
        ".status.autoscaling.target",
        0,
    )


def test_chart_crds_are_the_same_files() -> None:
    for path in CRD_FILES:
        assert (ROOT / "charts/triton-operator/crds" / path.name).read_text() == path.read_text()


EXAMPLE_CRS = [d for d in example_documents() if is_custom_resource(d)]


@pytest.mark.parametrize("document", EXAMPLE_CRS, ids=[f"{d['kind']}/{d['metadata']['name']}" for d in EXAMPLE_CRS])
def test_every_example_passes_the_crd_schema_and_cel_rules(document: dict[str, Any]) -> None:
    assert crd_errors(document) == []


def test_the_checker_itself_refuses_what_the_api_server_would() -> None:
    server = {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonServer",
        "metadata": {"name": "t"},
        "spec": {"replicas": "two", "unknown": 1},
    }
    problems = crd_errors(server)
    assert any("unknown" in p for p in problems) and any("replicas" in p for p in problems)


def _server(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonServer",
        "metadata": {"name": "t"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("gpus", "path", "words"),
    [
        ({"product": "NVIDIA-L4"}, "spec.gpus", "gpus.product needs gpus.count above 0"),
        ({"count": 0, "product": "NVIDIA-L4"}, "spec.gpus", "gpus.product needs gpus.count above 0"),
        ({"count": 1, "product": "NVIDIA L4"}, "spec.gpus.product", "String should match pattern"),
        ({"count": 1, "product": "-NVIDIA-L4"}, "spec.gpus.product", "String should match pattern"),
        ({"count": 1, "product": "N" * 64}, "spec.gpus.product", "at most 63 characters"),
    ],
    ids=["no-count", "count-0", "space", "leading-dash", "too-long"],
)
def test_a_gpu_product_without_gpus_or_not_a_label_value_is_refused_by_the_crd_and_python(
    gpus: dict[str, Any], path: str, words: str
) -> None:
    document = _server({"gpus": gpus})
    api_server = crd_errors(document)
    assert api_server, "the API server would accept it"
    if path == "spec.gpus":  # the CEL rule's own message, not the schema's
        assert any(words in problem for problem in api_server), api_server
    servers, _, [finding] = parse_resources([document])
    assert servers == [] and finding.path == path and words in finding.message


@pytest.mark.parametrize(
    "gpus",
    [
        {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"},
        {"count": 8, "product": "Tesla-T4"},
        {"count": 1, "product": "A.b_c-9"},
    ],
)
def test_a_gpu_product_with_gpus_passes_the_crd_and_python(gpus: dict[str, Any]) -> None:
    document = _server({"gpus": gpus})
    assert crd_errors(document) == []
    assert parse_resources([document])[0] != []
