"""Fields that name a file or an object where a relative name is meant (a model's file in its version
folder, a warm-up input in its warmup folder, the PVC and the folder in it, the image) take no NUL, line
break or `..` segment, and no absolute path: each would reach another file than the one validated (a NUL
ends a C string early; `..` leaves the folder), or a line of a file or log. Refused by validate, naming the
field, and by the API server (the CRD's patterns and rules)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.crd_check import crd_errors
from tests.support.resources import BASE_CONFIG, model_document, server_document
from triton_operator.api.parse import parse_resources
from triton_operator.render.fleet import plan_fleet

HOSTILE_PATHS = ["../other/1/model.onnx", "/etc/passwd", "model\x00.onnx", "model\n.onnx", "1/../../x", ".."]


def _warmup(path: str) -> dict[str, Any]:
    sample = {
        "name": "w",
        "batchSize": 1,
        "inputs": {"x": {"dataType": "TYPE_FP32", "dims": [3, 4], "inputDataFile": path}},
    }
    return {**BASE_CONFIG, "modelWarmup": [sample]}


# A document with `hostile` in one field, and the field's path in the findings.
FIELDS = {
    "defaultModelFilename": (
        lambda h: model_document({**BASE_CONFIG, "defaultModelFilename": h}),
        "spec.config.defaultModelFilename",
    ),
    "ccModelFilenames": (
        lambda h: model_document({**BASE_CONFIG, "ccModelFilenames": {"8.0": h}}),
        "spec.config.ccModelFilenames.8.0",
    ),
    "inputDataFile": (lambda h: model_document(_warmup(h)), "spec.config.modelWarmup[0].inputs.x.inputDataFile"),
    "claimName": (
        lambda h: server_document(modelRepository={"pvc": {"claimName": h}}),
        "spec.modelRepository.pvc.claimName",
    ),
    "subPath": (
        lambda h: server_document(modelRepository={"pvc": {"claimName": "models", "subPath": h}}),
        "spec.modelRepository.pvc.subPath",
    ),
    "image": (lambda h: server_document(image=h), "spec.image"),
    "memoryReader.image": (
        lambda h: server_document(memoryReader={"enabled": True, "image": h}),
        "spec.memoryReader.image",
    ),
}


def _errors(document: dict[str, Any]) -> list[str]:
    """The paths of the errors validate finds in the document."""
    servers, models, found = parse_resources([document])
    return [f.path for f in plan_fleet(servers, models, earlier=found).errors]


@pytest.mark.parametrize("hostile", HOSTILE_PATHS)
@pytest.mark.parametrize("field", FIELDS)
def test_a_path_that_leaves_its_folder_or_holds_a_control_character_is_refused(field: str, hostile: str) -> None:
    document_of, path = FIELDS[field]
    document = document_of(hostile)
    assert path in _errors(document)
    assert crd_errors(document), "the API server would take it"


@pytest.mark.parametrize(
    "image",
    [
        "nvcr.io/nvidia/tritonserver:25.07-py3 RUN touch /PWNED",
        "nvcr.io/nvidia/tritonserver:25.07-py3\nRUN touch /PWNED",
        "registry.example/../tritonserver:1",
        "registry.example/Triton:1",
        "tritonserver:",
    ],
)
def test_an_image_is_an_image_reference(image: str) -> None:
    assert "spec.image" in _errors(server_document(image=image)) and crd_errors(server_document(image=image))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("defaultModelFilename", "model.plan"),
        ("defaultModelFilename", "model.savedmodel/saved_model.pb"),
        ("ccModelFilenames", "model_8_0.plan"),
        ("inputDataFile", "raw_input"),
        ("inputDataFile", "sub/raw..input"),
        ("claimName", "team-a.models"),
        ("subPath", "fleet/models"),
        ("image", "nvcr.io/nvidia/tritonserver:25.07-py3"),
        ("image", "registry.example.com:5000/mirror/tritonserver:24.09-py3@sha256:" + "0" * 64),
        ("image", "nvcr.io/nvidia/tritonserver@sha256:" + "0" * 64),
        ("image", "tritonserver:latest"),
        ("memoryReader.image", "triton-operator:0.1.0"),
    ],
)
def test_a_relative_name_passes(field: str, value: str) -> None:
    document = FIELDS[field][0](value)
    assert _errors(document) == [] and crd_errors(document) == []
