"""`local --once` against a real tritonserver: each model's sample request comes from what it declares.
A BLS model (its MODEL_NAME input names the model it calls) has no meaningful generated sample and is
not failed for it; with probe inputs naming a real model it answers; a model with a modelWarmup reading
a data file gets that data, and fails on anything else."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.conftest import EXAMPLES, ROOT
from tests.support.local_mode import local_command, run_once
from tests.support.repository import ADD_SUB_CODE, SQUARE_CODE, SQUARE_SPEC_CONFIG

pytestmark = pytest.mark.triton

# Calls the model its MODEL_NAME input names (Triton's BLS pattern) with INPUT0 twice, and answers its OUTPUT0.
BLS_CODE = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            name = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy().reshape(-1)[0].decode()
            values = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            inputs = [pb_utils.Tensor("INPUT0", values), pb_utils.Tensor("INPUT1", values)]
            answer = pb_utils.InferenceRequest(
                model_name=name, requested_output_names=["OUTPUT0"], inputs=inputs
            ).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            output = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0")
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
"""
BLS_CONFIG = {
    "backend": "python",
    "input": [
        {"name": "MODEL_NAME", "dataType": "TYPE_STRING", "dims": [1]},
        {"name": "INPUT0", "dataType": "TYPE_FP32", "dims": [4]},
    ],
    "output": [{"name": "OUTPUT0", "dataType": "TYPE_FP32", "dims": [4]}],
    "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
}
PROBE = {
    "inputs": [
        {"name": "MODEL_NAME", "datatype": "BYTES", "shape": [1], "data": "add_sub"},
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
    ]
}
# Answers only the values of its warm-up file (Triton's own warm-up at load sends them too).
WARM_VALUES = [0.5, 1.5, 2.5, 3.5]
WARM_CODE = f"""\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            if values.reshape(-1).tolist() != {WARM_VALUES}:
                raise pb_utils.TritonModelException(f"not the warm-up data: {{values.tolist()}}")
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", values)]))
        return responses
"""
WARM_CONFIG = {
    "backend": "python",
    "maxBatchSize": 2,
    "input": [{"name": "INPUT", "dataType": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "OUTPUT", "dataType": "TYPE_FP32", "dims": [4]}],
    "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
    "modelWarmup": [
        {
            "name": "from_file",
            "batchSize": 1,
            "inputs": {"INPUT": {"dataType": "TYPE_FP32", "dims": [4], "inputDataFile": "input.bin"}},
        }
    ],
}


def _model(
    name: str, config: dict[str, Any], code: str, binary: dict[str, bytes] | None = None, **spec: Any
) -> list[dict[str, Any]]:
    """A TritonModel and the ConfigMap of its files: 1/model.py, and each binary file at warmup/<key>."""
    items = [{"key": "model.py", "path": "1/model.py"}] + [
        {"key": key, "path": f"warmup/{key}"} for key in binary or {}
    ]
    config_map: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-files"},
        "data": {"model.py": code},
    }
    if binary:
        config_map["binaryData"] = {key: base64.b64encode(content).decode() for key, content in binary.items()}
    model = {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonModel",
        "metadata": {"name": name.replace("_", "-")},
        "spec": {
            "serverRef": {"name": "triton"},
            "modelName": name,
            "files": {"configMapRef": {"name": f"{name}-files", "items": items}},
            "config": config,
            **spec,
        },
    }
    return [config_map, model]


@pytest.fixture
def crs(tmp_path: Path) -> Path:
    folder = tmp_path / "crs"
    folder.mkdir()
    (folder / "server.yaml").write_text((EXAMPLES / "server.yaml").read_text())
    documents = [
        *_model("add_sub", _add_sub_config(), ADD_SUB_CODE),
        *_model("bls", BLS_CONFIG, BLS_CODE),
        *_model("bls_probed", BLS_CONFIG, BLS_CODE, rollout={"probe": PROBE}),
        *_model("warm", WARM_CONFIG, WARM_CODE, {"input.bin": np.array(WARM_VALUES, dtype=np.float32).tobytes()}),
    ]
    (folder / "models.yaml").write_text(yaml.safe_dump_all(documents))
    return folder


def _add_sub_config() -> dict[str, Any]:
    """The add_sub of Triton's python_backend examples (no batching, dims [4]), as spec.config."""
    tensor = lambda name: {"name": name, "dataType": "TYPE_FP32", "dims": [4]}  # noqa: E731
    return {
        "backend": "python",
        "input": [tensor("INPUT0"), tensor("INPUT1")],
        "output": [tensor("OUTPUT0"), tensor("OUTPUT1")],
        "instanceGroup": [{"kind": "KIND_CPU"}],
    }


def test_once_sends_each_model_the_sample_it_declares_and_a_bls_without_one_is_no_failure(
    crs: Path, tmp_path: Path
) -> None:
    workdir = tmp_path / "work"
    process = run_once([crs], workdir)
    stdout, stderr = process.stdout, process.stderr
    samples = {
        line.split(":")[0].removeprefix("sample "): line.split(": ", 1)[1]
        for line in stdout.splitlines()
        if line.startswith("sample ")
    }
    assert process.returncode == 0, stdout + stderr
    assert samples["bls"].startswith("no meaningful sample: input 'MODEL_NAME' takes strings"), samples
    assert "spec.rollout.probe.inputs" in samples["bls"]
    assert samples["bls_probed"] == "ok: OUTPUT0 [4] (inputs from spec.rollout.probe.inputs)", samples
    assert samples["warm"] == "ok: OUTPUT [1, 4] (inputs from warm-up 'from_file')", samples
    assert samples["add_sub"] == "ok: OUTPUT0 [4], OUTPUT1 [4] (inputs from generated ones)", samples


# Answers OUTPUT cut to `{keep}` of its input's 4 values: the config promises 4.
CUT_CODE = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("OUTPUT", pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()[:{keep}])
                ]
            )
            for request in requests
        ]
"""
CUT_CONFIG = {
    "backend": "python",
    "input": [{"name": "INPUT", "dataType": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "OUTPUT", "dataType": "TYPE_FP32", "dims": [4]}],
    "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
}


def _once_with_examples_server(
    documents: list[dict[str, Any]], tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """`local --once` on the examples' server and `documents`: its run, and each model's sample line."""
    folder = tmp_path / "crs"
    folder.mkdir()
    (folder / "server.yaml").write_text((EXAMPLES / "server.yaml").read_text())
    (folder / "models.yaml").write_text(yaml.safe_dump_all(documents))
    process = subprocess.run(
        local_command([folder], tmp_path / "work", "--once"), cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    samples = {
        line.split(":")[0].removeprefix("sample "): line.split(": ", 1)[1]
        for line in process.stdout.splitlines()
        if line.startswith("sample ")
    }
    return process, samples


def test_once_fails_a_model_whose_output_is_not_what_its_config_promises(tmp_path: Path) -> None:
    """ "ok" means the answer has the config's shape and the bytes for it, not only that an answer came."""
    documents = [
        *_model("short", CUT_CONFIG, CUT_CODE.format(keep=2)),
        *_model("empty", CUT_CONFIG, CUT_CODE.format(keep=0)),
        *_model("whole", CUT_CONFIG, CUT_CODE.format(keep=4)),
    ]
    process, samples = _once_with_examples_server(documents, tmp_path)
    assert process.returncode == 1, process.stdout + process.stderr
    assert (
        samples["short"]
        == "failed: output 'OUTPUT' has shape [2], the config promises [4] (inputs from generated ones)"
    ), samples
    assert (
        samples["empty"]
        == "failed: output 'OUTPUT' has shape [0], the config promises [4] (inputs from generated ones)"
    ), samples
    assert samples["whole"] == "ok: OUTPUT [4] (inputs from generated ones)", samples


# Sends an error response on the stream, as a broken decoupled model does, and ends the request.
STREAM_ERROR_CODE = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            request.get_response_sender().send(
                pb_utils.InferenceResponse(error=pb_utils.TritonError("the stream broke")),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None
"""
# Sends OUT of two values where the config promises one, then ends the request.
STREAM_CUT_CODE = SQUARE_CODE.replace("np.array([count], np.int32)", "np.array([count, count], np.int32)")


def test_once_samples_a_decoupled_model_on_a_stream(tmp_path: Path) -> None:
    """Its responses on the stream are judged as a unary answer is; an error on the stream fails it; a request
    answered with no data is none."""
    silent = {"probe": {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [0]}]}}
    three = {"probe": {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [3]}]}}
    documents = [
        *_model("square", SQUARE_SPEC_CONFIG, SQUARE_CODE, rollout=three),
        *_model("square_silent", SQUARE_SPEC_CONFIG, SQUARE_CODE, rollout=silent),
        *_model("stream_error", SQUARE_SPEC_CONFIG, STREAM_ERROR_CODE),
        *_model("stream_cut", SQUARE_SPEC_CONFIG, STREAM_CUT_CODE),
    ]
    process, samples = _once_with_examples_server(documents, tmp_path)
    assert process.returncode == 1, process.stdout + process.stderr
    assert (
        samples["square"]
        == "ok: 3 responses with data on the stream, then the final one (inputs from spec.rollout.probe.inputs)"
    ), samples
    assert (
        samples["square_silent"]
        == "ok: 0 responses with data on the stream, then the final one (inputs from spec.rollout.probe.inputs)"
    ), samples
    assert samples["stream_error"] == "failed: the stream broke (inputs from generated ones)", samples
    assert (
        samples["stream_cut"]
        == "failed: output 'OUT' has shape [2], the config promises [1] (inputs from generated ones)"
    ), samples


# A sequence model as Triton's QA ones are written: a request that starts and ends its sequence at once, a
# correlation id seen before, or an END without its START is refused; START, END and CORRID come as controls.
SEQUENCE_CODE = """\
import json

import triton_python_backend_utils as pb_utils


def control(request, name):
    value = pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]
    return value.decode() if isinstance(value, bytes) else int(value)


class TritonPythonModel:
    def initialize(self, args):
        self.started = set()
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))

    def execute(self, requests):
        responses = []
        for request in requests:
            start, end, correlation_id = control(request, "START"), control(request, "END"), control(request, "CORRID")
            if start and end:
                raise pb_utils.TritonModelException("START and END in one request")
            if start and correlation_id in self.started:
                raise pb_utils.TritonModelException(f"correlation id {correlation_id} was seen before")
            if not start and correlation_id not in self.started:
                raise pb_utils.TritonModelException(f"no START for correlation id {correlation_id}")
            self.started.add(correlation_id)
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            response = pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", values)])
            if self.decoupled:
                request.get_response_sender().send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                responses.append(response)
        return None if self.decoupled else responses
"""


def _sequence_config(decoupled: bool = False) -> dict[str, Any]:
    def flag(name: str, kind: str) -> dict[str, Any]:
        return {"name": name, "control": [{"kind": kind, "int32FalseTrue": [0, 1]}]}

    return {
        "backend": "python",
        "maxBatchSize": 0 if decoupled else 4,
        "modelTransactionPolicy": {"decoupled": decoupled},
        "input": [{"name": "IN", "dataType": "TYPE_INT32", "dims": [1]}],
        "output": [{"name": "OUT", "dataType": "TYPE_INT32", "dims": [1]}],
        "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
        "sequenceBatching": {
            "controlInput": [
                flag("START", "CONTROL_SEQUENCE_START"),
                flag("END", "CONTROL_SEQUENCE_END"),
                {"name": "CORRID", "control": [{"kind": "CONTROL_SEQUENCE_CORRID", "dataType": "TYPE_UINT64"}]},
            ]
        },
    }


# Models whose execute answers nothing a client can use.
RETURNS_CODE = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return {answer}
"""


def test_once_samples_sequence_models_as_a_sequence_and_says_when_execute_answers_nothing(tmp_path: Path) -> None:
    no_outputs = "[pb_utils.InferenceResponse() for _ in requests]"
    documents = [
        *_model("sequence", _sequence_config(), SEQUENCE_CODE),
        *_model("sequence_stream", _sequence_config(decoupled=True), SEQUENCE_CODE),
        *_model("returns_empty_list", CUT_CONFIG, RETURNS_CODE.format(answer="[]")),
        *_model("returns_none", CUT_CONFIG, RETURNS_CODE.format(answer="None")),
        *_model("returns_no_outputs", CUT_CONFIG, RETURNS_CODE.format(answer=no_outputs)),
    ]
    process, samples = _once_with_examples_server(documents, tmp_path)
    assert process.returncode == 1, process.stdout + process.stderr
    assert samples["sequence"] == "ok: OUT [1, 1] (inputs from generated ones)", samples
    assert (
        samples["sequence_stream"]
        == "ok: 2 responses with data on the stream, then the final one (inputs from generated ones)"
    ), samples
    assert samples["returns_empty_list"] == (
        "failed: the model's execute returned 0 responses for 1 request(s): it must return one InferenceResponse "
        "per request, in order (or None after sending each with request.get_response_sender()) "
        "(inputs from generated ones)"
    ), samples
    assert samples["returns_none"] == (
        "failed: the model's execute returned no response for the request (Triton counted it done, and no answer "
        "came): return one InferenceResponse per request, or send it with request.get_response_sender() "
        "(inputs from generated ones)"
    ), samples
    assert samples["returns_no_outputs"] == (
        "failed: the response holds no outputs (execute answered with an InferenceResponse without "
        "output_tensors); the config promises 'OUTPUT' (inputs from generated ones)"
    ), samples
