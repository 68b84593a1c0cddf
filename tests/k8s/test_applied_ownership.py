"""The operator's create leaves its fields under an Update entry (a POST is an Update to the API
server), which a later server-side apply never drops: a memory limit the operator stopped rendering
stayed on the Deployment, and the API server refused every write after (a request above that limit).
The patch moves them into its Apply entry; the real API server's side is in tests/e2e."""

from __future__ import annotations

from typing import Any

from triton_operator.k8s.api import FIELD_MANAGER, applied_ownership_patch


def entry(manager: str, operation: str, fields: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
    found = {"manager": manager, "operation": operation, "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
             "fieldsV1": fields, "time": "2026-11-28T20:21:35Z"}  # fmt: skip
    return found | ({"subresource": subresource} if subresource else {})


LIMIT = {"f:spec": {"f:template": {"f:spec": {"f:containers": {'k:{"name":"tritonserver"}': {"f:resources": {
    "f:limits": {"f:memory": {}}, "f:requests": {"f:memory": {}}}}}}}}}  # fmt: skip
REPLICAS = {"f:spec": {"f:replicas": {}}}
STATUS = {"f:status": {"f:replicas": {}}}


def deployment(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "triton", "resourceVersion": "42", "managedFields": list(entries)}}


def test_the_create_s_fields_join_the_apply_entry_and_others_stay_as_they_are() -> None:
    controller = entry("kube-controller-manager", "Update", STATUS, "status")
    patch = applied_ownership_patch(
        deployment(entry(FIELD_MANAGER, "Update", LIMIT), entry(FIELD_MANAGER, "Apply", REPLICAS), controller)
    )
    assert patch is not None
    test, replace = patch
    assert test == {"op": "test", "path": "/metadata/resourceVersion", "value": "42"}
    ours, theirs = replace["value"]
    assert theirs == controller
    assert ours["operation"] == "Apply" and ours["manager"] == FIELD_MANAGER
    assert ours["fieldsV1"] == {"f:spec": {"f:replicas": {}, **LIMIT["f:spec"]}}


def test_a_create_never_applied_becomes_the_apply_entry() -> None:
    patch = applied_ownership_patch(deployment(entry(FIELD_MANAGER, "Update", LIMIT)))
    assert patch is not None
    [ours] = patch[1]["value"]
    assert ours["operation"] == "Apply" and ours["fieldsV1"] == LIMIT


def test_nothing_to_move_is_no_patch() -> None:
    assert applied_ownership_patch(deployment(entry(FIELD_MANAGER, "Apply", LIMIT))) is None
    # Another manager's Update, and the operator's own writes to a subresource, are not its create.
    assert applied_ownership_patch(deployment(entry("kubectl", "Update", LIMIT))) is None
    assert applied_ownership_patch(deployment(entry(FIELD_MANAGER, "Update", STATUS, "status"))) is None
    assert applied_ownership_patch({"metadata": {"name": "kmock's", "resourceVersion": "1"}}) is None
