"""Local mode says which Triton it runs and whether the server's image is a newer release; an error naming an
argument its Triton does not know gets that said beside it. The releases of Triton's versions are those of
build.py's version map at each tag of Triton's server."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from tests.support.local_mode import run_once
from tests.support.ports import free_ports
from triton_operator.api.server import DEFAULT_IMAGE, TritonServerSpec
from triton_operator.local.tritonserver import LocalTriton, Ports
from triton_operator.local.versions import running_line, server_release, with_hint


@pytest.mark.parametrize(
    ("version", "release"),
    [
        ("2.10.0", (21, 5)),
        ("2.17.0", (21, 12)),
        ("2.18.0", (22, 1)),
        ("2.51.0", (24, 10)),
        ("2.59.0", (25, 6)),
        ("2.59.1", (25, 7)),  # a patch release with a month of its own
        ("2.60.0", (25, 8)),
        ("2.71.0", (26, 7)),
        ("2.73.0dev", (26, 9)),
        ("2.9.0", None),
        ("1.13.0", None),
        ("", None),
    ],
)
def test_a_triton_version_is_the_release_nvidia_built_it_for(version: str, release: tuple[int, int] | None) -> None:
    assert server_release(version) == release


PYBIND_ERROR = (
    "Failed to process the request(s) for model 'm_0', message: TypeError: __init__(): incompatible constructor "
    "arguments. The following argument types are supported:\n    1. c_python_backend_utils.InferenceResponse(...)"
)
PYTHON_ERROR = "TypeError: InferenceResponse.__init__() got an unexpected keyword argument 'parameters'"
HINT = (
    "hint: this tritonserver is 2.51.0 (release 24.10), older than the server's image "
    "nvcr.io/nvidia/tritonserver:25.07-py3 (release 25.07): an argument added since 24.10 is unknown here, and "
    "known on that image"
)


@pytest.mark.parametrize(
    "error", [PYBIND_ERROR, PYTHON_ERROR, "TypeError: f() takes 1 positional argument but 2 were given"]
)
def test_an_unknown_argument_on_an_older_triton_gets_the_hint(error: str) -> None:
    assert with_hint(error, "2.51.0", "nvcr.io/nvidia/tritonserver:25.07-py3") == f"{error}\n{HINT}"


@pytest.mark.parametrize(
    ("error", "image"),
    [
        ("ValueError: the tokenizer folder is missing", "nvcr.io/nvidia/tritonserver:25.07-py3"),
        (PYTHON_ERROR, "nvcr.io/nvidia/tritonserver:24.10-py3"),  # the same release: the argument is wrong there too
        (PYTHON_ERROR, "nvcr.io/nvidia/tritonserver:24.09-py3"),
        (PYTHON_ERROR, "registry.example.com/my-triton:1.0"),  # names no release
    ],
)
def test_no_hint_for_other_errors_or_an_image_no_newer(error: str, image: str) -> None:
    assert with_hint(error, "2.51.0", image) == error


def test_the_running_line_names_the_release_and_a_newer_image() -> None:
    assert (
        running_line("2.51.0", "nvcr.io/nvidia/tritonserver:24.10-py3") == "tritonserver 2.51.0 (release 24.10) is up"
    )
    assert running_line("2.51.0", "mirror.example.com/nvidia/tritonserver:25.02-py3") == (
        "tritonserver 2.51.0 (release 24.10) is up; the server's image "
        "mirror.example.com/nvidia/tritonserver:25.02-py3 is release 25.02, newer: what Triton's API gained since "
        "24.10 is unknown here, and a model using it fails here only"
    )
    assert running_line("", DEFAULT_IMAGE) == "tritonserver (version unread) is up"


# Response parameters came to the python backend in 25.02 (its r25.02 binds InferenceResponse's `parameters`);
# a release other than the default image's, to see the TritonServer's own is the one compared.
NEWER_IMAGE = "nvcr.io/nvidia/tritonserver:25.08-py3"
CONFIG = """\
backend: "python"
input [{ name: "X" data_type: TYPE_FP32 dims: [1] }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [1] }]
instance_group [{ count: 1 kind: KIND_CPU }]
"""
ANSWERS_WITH_PARAMETERS = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(request, "X").as_numpy())],
                parameters={"tokens": 1},
            )
            for request in requests
        ]
"""
INITIALIZES_WITH_PARAMETERS = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.empty = pb_utils.InferenceResponse(output_tensors=[], parameters={"ready": True})

    def execute(self, requests):
        return [self.empty for _ in requests]
"""


def _wheels_triton_version(workdir: Path) -> str:
    """What the wheel's tritonserver says of itself in its server metadata."""
    with LocalTriton(TritonServerSpec(), workdir, Ports(*free_ports(3))) as triton:
        with urllib.request.urlopen(f"{triton.http_url}/v2", timeout=30) as response:
            return str(json.load(response)["version"])


@pytest.mark.triton
def test_local_names_its_triton_and_hints_at_a_newer_image_where_an_argument_is_unknown(tmp_path: Path) -> None:
    """InferenceResponse(parameters=...) on the wheel's older Triton: at inference (the sample) and in
    initialize (the load); the TritonServer's image is a newer release."""
    version = _wheels_triton_version(tmp_path / "probe")
    running = server_release(version)
    assert running is not None and running < (25, 2), f"the wheel's Triton {version} knows response parameters"
    release = f"{running[0]:02d}.{running[1]:02d}"
    crs, models = tmp_path / "crs", tmp_path / "models"
    crs.mkdir()
    (crs / "server.yaml").write_text(
        "apiVersion: triton-operator.io/v1alpha1\nkind: TritonServer\nmetadata: {name: triton}\n"
        f"spec: {{image: '{NEWER_IMAGE}', modelRepository: {{pvc: {{claimName: models}}}}}}\n"
    )
    for name, code in (("answers", ANSWERS_WITH_PARAMETERS), ("initializes", INITIALIZES_WITH_PARAMETERS)):
        (models / name / "1").mkdir(parents=True)
        (models / name / "config.pbtxt").write_text(CONFIG)
        (models / name / "1" / "model.py").write_text(code)
    workdir = tmp_path / "work"
    process = run_once([crs], workdir, "--model-repository", str(models))
    stdout, stderr = process.stdout, process.stderr
    assert process.returncode == 1, stdout + stderr
    start = (
        f"tritonserver {version} (release {release}) is up; the server's image {NEWER_IMAGE} is release 25.08, newer: "
    )
    assert any(line.startswith(start) for line in stdout.splitlines()), stdout
    hint = (
        f"hint: this tritonserver is {version} (release {release}), older than the server's image {NEWER_IMAGE} "
        f"(release 25.08): an argument added since {release} is unknown here, and known on that image"
    )
    sample = stdout.split("sample answers: ", 1)[1].split("\nsample ", 1)[0]
    assert sample.startswith("failed: ") and "parameters={'tokens': 1}" in sample, stdout
    assert sample.endswith(f"\n{hint}"), stdout
    # The load's error, printed whole below the table, ends with the hint too.
    load = stdout.split("\ninitializes: load failed for model 'initializes'", 1)[1].split("\nsample ", 1)[0]
    assert "parameters={'ready': True}" in load and load.endswith(f"\n{hint}"), stdout
