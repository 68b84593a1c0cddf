"""Rendered Kubernetes objects checked against the Kubernetes schema (strict), as the API server would.

`kubernetes_validate.validate` re-reads and re-parses its JSON schema files on every call, which was
most of the time of validating a fleet (bench/RESULTS.md, "Measurements behind the design"); here each
kind's validator is built once and reused.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..api.findings import Finding
from ..api.parse import object_id
from ..api.types import API_VERSION
from .autoscaler_manifests import KEDA_API_VERSION

if TYPE_CHECKING:
    import jsonschema

KUBERNETES_VERSION = "1.30"
# Kinds outside Kubernetes' schema: our own are checked by the API models; KEDA's ScaledObject is rendered
# from typed fields only, held to KEDA's documented spec by tests/render/test_autoscaling.py.
NOT_IN_KUBERNETES_SCHEMA = {API_VERSION, KEDA_API_VERSION}


@functools.cache
def _schema_folder(version: str) -> str:
    from kubernetes_validate.utils import all_versions, major_minor

    schema_version = [v for v in all_versions() if major_minor(v) <= major_minor(version)][-1]
    return f"kubernetes-json-schema/v{schema_version}-local-strict"


@functools.cache
def _definitions(version: str) -> Any:
    """The definitions every kind's schema refers to: one large JSON file, parsed once, not once a kind."""
    from kubernetes_validate.utils import schema_contents

    return schema_contents(f"{_schema_folder(version)}/_definitions.json", version)


@functools.cache
def _validator(kind: str, api_version: str, version: str = KUBERNETES_VERSION) -> jsonschema.Validator:
    """The strict schema of one kind, located as kubernetes_validate locates it. jsonschema is imported
    here, when a first object is checked: `validate` of models alone starts without it."""
    import jsonschema
    import kubernetes_validate
    from kubernetes_validate.utils import major_minor, schema_contents
    from referencing import Registry, Resource

    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = schema_contents(f"{_schema_folder(version)}/{kind.lower()}-{group_version}.json", version)
    except FileNotFoundError:
        raise kubernetes_validate.SchemaNotFoundError(
            version=major_minor(version), kind=kind, api_version=api_version
        ) from None
    registry = Resource.from_contents(_definitions(version)) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def check_manifest(obj: dict[str, Any]) -> list[Finding]:
    """Every way one object breaks the Kubernetes schema; kinds it does not hold are checked elsewhere."""
    if obj["apiVersion"] in NOT_IN_KUBERNETES_SCHEMA:
        return []
    where = object_id(obj["kind"], obj["metadata"])
    return [
        Finding(
            "error",
            ".".join(str(part) for part in error.absolute_path),
            f"{error.message} (Kubernetes {KUBERNETES_VERSION} schema)",
            obj=where,
        )
        for error in _validator(obj["kind"], obj["apiVersion"]).iter_errors(obj)
    ]


def check_manifests(objects: Iterable[dict[str, Any]]) -> list[Finding]:
    """Every object against the Kubernetes schema, so pod overrides that are wrong show here."""
    return [finding for obj in objects for finding in check_manifest(obj)]
