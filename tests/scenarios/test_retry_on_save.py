"""A failed revision is loaded again when its model or its files are saved again, unchanged.

A python model that failed for a package missing from its environment needs no new revision once the
package is there: touching its TritonModel (a label or annotation) or its files' ConfigMap retries the
load. Status writes, which change the objects too, retry nothing.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.support.models import add_code
from tests.support.operator import Cluster, Pods, api_server, load_calls, running_operator
from tests.support.resources import FILES
from tests.support.serving import infer, serve_add_model
from triton_operator.k8s.watch.indexes import touch_fingerprint, touched

MODEL_BODY = {
    "metadata": {"name": "add", "resourceVersion": "7", "labels": {"team": "a"}},
    "spec": {"config": {}},
    "status": {},
}


def with_metadata(**changes: object) -> dict:
    body = copy.deepcopy(MODEL_BODY)
    body["metadata"].update(changes)
    return body


@pytest.mark.parametrize(
    "event_type, after, retried",
    [
        ("MODIFIED", with_metadata(labels={"team": "a", "touched": "1"}), True),  # kubectl label
        ("MODIFIED", with_metadata(annotations={"touched": "1"}), True),  # kubectl annotate
        (
            None,
            with_metadata(annotations={"touched": "1"}),
            True,
        ),  # changed while the watch was down: the re-listing shows it
        ("MODIFIED", with_metadata(resourceVersion="8"), False),  # a status write
        ("MODIFIED", {**with_metadata(resourceVersion="8"), "status": {"conditions": []}}, False),
        ("MODIFIED", {**MODEL_BODY, "spec": {"config": {"maxBatchSize": 2}}}, False),  # a new revision is loaded anyway
        ("DELETED", with_metadata(annotations={"touched": "1"}), False),
    ],
)
def test_a_model_is_touched_by_its_labels_and_annotations_only(
    event_type: str | None, after: dict, retried: bool
) -> None:
    assert touched(event_type, touch_fingerprint(MODEL_BODY), touch_fingerprint(after)) is retried


def test_a_model_seen_first_is_not_touched() -> None:
    assert not touched(None, None, touch_fingerprint(MODEL_BODY)) and not touched(
        "ADDED", None, touch_fingerprint(MODEL_BODY)
    )


def loaded_reason(cluster: Cluster, model: str) -> str:
    return (cluster.condition("TritonModel", model, "Loaded") or {}).get("reason", "")


@pytest.mark.triton
async def test_a_failed_load_is_retried_when_its_model_or_files_are_saved_again(pods: Pods, tmp_path: Path) -> None:
    packages = tmp_path / "site-packages"  # stands in for the environment the model runs in
    packages.mkdir()
    files = copy.deepcopy(FILES)
    files["data"]["model.py"] = add_code(
        initialize=f"import sys; sys.path.insert(0, {str(packages)!r}); import needed_package"
    ).decode()
    async with api_server() as cluster, running_operator(cluster, resync_seconds=1) as operator:
        await serve_add_model(cluster, pods, ("triton-a",), files=files)
        triton = pods.tritons["triton-a"]
        await cluster.wait("LoadFailed", lambda: loaded_reason(cluster, "add") == "LoadFailed")
        assert "No module named 'needed_package'" in cluster.condition("TritonModel", "add", "Loaded")["message"]

        # Passes write the statuses (new resourceVersions, MODIFIED events) and retry nothing.
        worker = operator.workers.get(("default", "triton"))
        loads = load_calls()
        await worker.next_pass()
        await worker.next_pass()
        assert load_calls() == loads

        # A label on the TritonModel: loaded once more (and refused again: the package is still missing).
        await cluster.patch("TritonModel", "add", {"metadata": {"labels": {"touched": "1"}}})
        await cluster.wait("the load retried", lambda: load_calls() == loads + 1)
        await worker.next_pass()
        await worker.next_pass()
        assert load_calls() == loads + 1 and loaded_reason(cluster, "add") == "LoadFailed"

        # The package installed, the ConfigMap annotated (its data unchanged): loaded, and serving.
        (packages / "needed_package.py").write_text("")
        await cluster.patch("ConfigMap", "add-files", {"metadata": {"annotations": {"saved": "again"}}})
        await cluster.wait("Loaded", lambda: loaded_reason(cluster, "add") == "Loaded")
        assert load_calls() == loads + 2
        assert infer(triton.grpc_url) == [2.0] * 4
