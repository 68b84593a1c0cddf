"""The sample request local mode sends each model, as pure steps: `spec.rollout.probe.inputs` checked
against the config (each rule with a failing example), and the inputs built from a probe, from each
kind of Triton warm-up, or generated, or none where generated data cannot mean anything."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError
from tritonclient.utils import serialize_byte_tensor

from tests.support.crd_check import crd_errors
from tests.support.resources import SERVER, model_document
from triton_operator.api.config_json import parse_model_config
from triton_operator.api.probe_spec_checks import validate_probe
from triton_operator.api.resources import TritonModel, TritonServer
from triton_operator.local.samples import model_file_reader
from triton_operator.render.fleet import plan_fleet
from triton_operator.triton.probe_inputs import (
    NoSample,
    SampleRequest,
    WarmupDataError,
    sample_request,
)

# A BLS-shaped model: which model to call (a string) and what to send it.
BLS_CONFIG: dict[str, Any] = {
    "backend": "python",
    "maxBatchSize": 4,
    "input": [
        {"name": "MODEL_NAME", "dataType": "TYPE_STRING", "dims": [1]},
        {"name": "INPUT0", "dataType": "TYPE_FP32", "dims": [-1]},
        {"name": "TEMPERATURE", "dataType": "TYPE_FP32", "dims": [1], "optional": True},
    ],
    "output": [{"name": "OUTPUT0", "dataType": "TYPE_FP32", "dims": [-1]}],
}
GOOD_PROBE: dict[str, Any] = {
    "inputs": [
        {"name": "MODEL_NAME", "datatype": "BYTES", "shape": [1, 1], "data": "add_sub"},
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 3], "data": [1, 2.5, 3]},
    ]
}
FILES = {"configMapRef": {"name": "bls-files", "items": [{"key": "model.py", "path": "1/model.py"}]}}
NO_FILES: dict[str, bytes] = {}


def _probe_findings(probe: dict[str, Any], config: dict[str, Any] = BLS_CONFIG) -> list[tuple[str, str]]:
    model = TritonModel.model_validate(model_document(config, rollout={"probe": probe}))
    assert model.spec.rollout is not None
    return [
        (finding.path, finding.message)
        for finding in validate_probe(model.spec.rollout.probe, parse_model_config(config))
    ]


def _changed(path: str, value: Any) -> dict[str, Any]:
    """GOOD_PROBE with inputs[i].field set to value (path "i.field")."""
    probe = copy.deepcopy(GOOD_PROBE)
    index, field = path.split(".")
    probe["inputs"][int(index)][field] = value
    return probe


def test_a_probe_that_fits_the_config_is_valid_for_python_and_the_api_server() -> None:
    assert _probe_findings(GOOD_PROBE) == []
    assert crd_errors(model_document(BLS_CONFIG, rollout={"probe": GOOD_PROBE})) == []
    server = TritonServer.model_validate({**SERVER, "metadata": {"name": "triton", "namespace": "default"}})
    model = TritonModel.model_validate(model_document(BLS_CONFIG, rollout={"probe": GOOD_PROBE}, files=FILES))
    fleet = plan_fleet([server], [model], {("default", "bls-files"): {"data": {"model.py": "x"}}})
    assert [len(s.models) for s in fleet.servers] == [1], fleet.findings


# (id, the probe, finding path, words of the message): what only the config can decide.
CONFIG_RULES: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "unknown input",
        _changed("1.name", "INPUT9"),
        "spec.rollout.probe.inputs[1].name",
        "'INPUT9' is not an input of the model; its inputs: MODEL_NAME, INPUT0, TEMPERATURE",
    ),
    (
        "datatype",
        _changed("1.datatype", "FP64"),
        "spec.rollout.probe.inputs[1].datatype",
        "is FP64, input 'INPUT0' is TYPE_FP32: use FP32",
    ),
    (
        "no batch dim",
        _changed("1.shape", [3]),
        "spec.rollout.probe.inputs[1].shape",
        "it takes [1..4, any] (the batch size first, as maxBatchSize > 0, then dims [-1])",
    ),
    (
        "batch above max",
        _changed("0.shape", [5, 1]),
        "spec.rollout.probe.inputs[0].shape",
        "[5, 1] does not fit input 'MODEL_NAME': it takes [1..4, 1]",
    ),
    (
        "fixed dim",
        _changed("0.shape", [1, 2]),
        "spec.rollout.probe.inputs[0].shape",
        "[1, 2] does not fit input 'MODEL_NAME'",
    ),
    (
        "required input missing",
        {"inputs": GOOD_PROBE["inputs"][:1]},
        "spec.rollout.probe.inputs",
        "input 'INPUT0' is required: add it",
    ),
    (
        "unknown output",
        {**GOOD_PROBE, "expectedOutputs": [{"name": "OUT", "datatype": "FP32", "shape": [1, 1], "data": [1]}]},
        "spec.rollout.probe.expectedOutputs[0].name",
        "'OUT' is not an output of the model; its outputs: OUTPUT0",
    ),
    (
        "output datatype",
        {**GOOD_PROBE, "expectedOutputs": [{"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 1], "data": [1]}]},
        "spec.rollout.probe.expectedOutputs[0].datatype",
        "is INT32, output 'OUTPUT0' is TYPE_FP32: use FP32",
    ),
]


@pytest.mark.parametrize(
    ("probe", "path", "words"), [rule[1:] for rule in CONFIG_RULES], ids=[rule[0] for rule in CONFIG_RULES]
)
def test_each_rule_against_the_config_names_the_field_and_what_to_do(
    probe: dict[str, Any], path: str, words: str
) -> None:
    findings = _probe_findings(probe)
    assert any(found_path == path and words in message for found_path, message in findings), findings


def test_a_model_without_batching_takes_the_dims_alone() -> None:
    config = {**BLS_CONFIG, "maxBatchSize": 0}
    unbatched = {"inputs": [{**GOOD_PROBE["inputs"][0], "shape": [1]}, {**GOOD_PROBE["inputs"][1], "shape": [3]}]}
    assert _probe_findings(unbatched, config) == []
    assert _probe_findings(GOOD_PROBE, config)[0] == (
        "spec.rollout.probe.inputs[0].shape",
        "[1, 1] does not fit input 'MODEL_NAME': it takes [1] (dims [1])",
    )


# (id, the probe, words of pydantic's message): what the probe alone decides, before any config is read.
SELF_RULES: list[tuple[str, dict[str, Any], str]] = [
    ("count", _changed("1.data", [1, 2]), "data holds 2 values, shape [1, 3] holds 3"),
    ("number type", _changed("1.data", [1, "two", 3]), "data[1] is 'two': FP32 takes numbers"),
    ("integer type", _changed("1.datatype", "INT32"), "data[1] is 2.5: INT32 takes integers"),
    (
        "integer range",
        {"inputs": [{"name": "X", "datatype": "UINT8", "shape": [1], "data": [256]}]},
        "data[0] is 256: UINT8 holds 0 to 255",
    ),
    (
        "bool",
        {"inputs": [{"name": "X", "datatype": "BOOL", "shape": [1], "data": [1]}]},
        "data[0] is 1: BOOL takes true or false",
    ),
    ("string for numbers", _changed("1.data", "1 2 3"), "one string fills a BYTES tensor only"),
    ("numbers for BYTES", _changed("0.data", [7]), "data[0] is 7: BYTES takes strings"),
    (
        "a name twice",
        {"inputs": [GOOD_PROBE["inputs"][0], GOOD_PROBE["inputs"][0]]},
        "each name may appear once; repeated: MODEL_NAME",
    ),
    ("no inputs", {"inputs": []}, "at least 1 item"),
    (
        "outputs alone",
        {"expectedOutputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1]}]},
        "give inputs too",
    ),
    ("no rate", {"requestsPerSecond": 0}, "greater than 0"),
    ("unknown datatype", _changed("1.datatype", "FLOAT"), "Input should be 'BOOL'"),
]


@pytest.mark.parametrize(("probe", "words"), [rule[1:] for rule in SELF_RULES], ids=[rule[0] for rule in SELF_RULES])
def test_each_rule_of_the_probe_alone_names_the_field(probe: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError) as raised:
        TritonModel.model_validate(model_document(BLS_CONFIG, rollout={"probe": probe}))
    [error] = raised.value.errors()
    assert error["loc"][:3] == ("spec", "rollout", "probe") and words in error["msg"], raised.value


def test_the_server_rollout_takes_no_probe_which_belongs_to_one_model() -> None:
    spec = {**SERVER["spec"], "rollout": {"probe": GOOD_PROBE}}
    with pytest.raises(ValidationError, match="probe"):
        TritonServer.model_validate({**SERVER, "spec": spec})


# Building the sample's inputs.

RNG_SEED = 7
WARM_CONFIG: dict[str, Any] = {
    "backend": "python",
    "maxBatchSize": 4,
    "input": [
        {"name": "INPUT", "dataType": "TYPE_FP32", "dims": [4]},
        {"name": "TEXT", "dataType": "TYPE_STRING", "dims": [2]},
    ],
    "output": [{"name": "OUTPUT", "dataType": "TYPE_FP32", "dims": [4]}],
}


def _warmup_sample(
    inputs: dict[str, Any], files: dict[str, bytes] = NO_FILES, max_batch_size: int = 4, batch_size: int = 2
) -> SampleRequest:
    config = {
        **WARM_CONFIG,
        "maxBatchSize": max_batch_size,
        "modelWarmup": [{"name": "w", "batchSize": batch_size, "inputs": inputs}],
    }
    request = sample_request(parse_model_config(config), None, files.get, np.random.default_rng(RNG_SEED))
    assert isinstance(request, SampleRequest) and request.source == "warm-up 'w'"
    return request


def _values(request: SampleRequest) -> dict[str, tuple[str, np.ndarray]]:
    return {given.name: (given.datatype, given.values) for given in request.inputs}


def test_zero_data_is_zeros_and_empty_strings_in_one_request_of_a_batch_of_one() -> None:
    request = _warmup_sample(
        {
            "INPUT": {"dataType": "TYPE_FP32", "dims": [4], "zeroData": True},
            "TEXT": {"dataType": "TYPE_STRING", "dims": [2], "zeroData": True},
        }
    )
    values = _values(request)
    assert values["INPUT"][0] == "FP32" and values["INPUT"][1].tolist() == [[0.0] * 4]
    assert values["TEXT"][0] == "BYTES" and values["TEXT"][1].tolist() == [[b"", b""]]


def test_random_data_is_random_bytes_read_as_the_type_and_strings_stay_empty() -> None:
    request = _warmup_sample(
        {
            "INPUT": {"dataType": "TYPE_INT16", "dims": [4], "randomData": True},
            "TEXT": {"dataType": "TYPE_STRING", "dims": [2], "randomData": True},
        }
    )
    expected = np.frombuffer(np.random.default_rng(RNG_SEED).bytes(8), dtype=np.int16)
    assert _values(request)["INPUT"][1].tolist() == [expected.tolist()]
    assert _values(request)["TEXT"][1].tolist() == [[b"", b""]]


def test_an_input_data_file_gives_its_first_bytes_and_strings_as_triton_serializes_them() -> None:
    numbers = np.arange(6, dtype=np.float32).tobytes()  # more than the dims take: Triton reads the first 16 bytes
    strings = serialize_byte_tensor(np.array([b"add_sub", b"hello"], dtype=np.object_)).item()
    files = {"warmup/numbers.bin": numbers, "warmup/strings.bin": strings}
    request = _warmup_sample(
        {
            "INPUT": {"dataType": "TYPE_FP32", "dims": [4], "inputDataFile": "numbers.bin"},
            "TEXT": {"dataType": "TYPE_STRING", "dims": [2], "inputDataFile": "strings.bin"},
        },
        files,
        max_batch_size=0,
        batch_size=1,
    )
    assert _values(request)["INPUT"][1].tolist() == [0.0, 1.0, 2.0, 3.0]  # no batch dimension with maxBatchSize 0
    assert _values(request)["TEXT"][1].tolist() == [b"add_sub", b"hello"]


@pytest.mark.parametrize(
    ("files", "words"),
    [
        (NO_FILES, "input 'INPUT' reads warmup/numbers.bin, which is not among the model's files"),
        ({"warmup/numbers.bin": b"\0" * 15}, "warmup/numbers.bin holds 15 bytes, dims [4] of FP32 take 16"),
    ],
)
def test_a_missing_or_short_data_file_is_an_error(files: dict[str, bytes], words: str) -> None:
    with pytest.raises(WarmupDataError, match=re.escape(words)):
        _warmup_sample({"INPUT": {"dataType": "TYPE_FP32", "dims": [4], "inputDataFile": "numbers.bin"}}, files)


def test_a_string_file_must_hold_the_strings_the_dims_take() -> None:
    strings = serialize_byte_tensor(np.array([b"one"], dtype=np.object_)).item()
    with pytest.raises(WarmupDataError, match="holds 1 strings, dims \\[2\\] hold 2"):
        _warmup_sample(
            {"TEXT": {"dataType": "TYPE_STRING", "dims": [2], "inputDataFile": "s.bin"}}, {"warmup/s.bin": strings}
        )


def test_the_first_warmup_triton_runs_is_used_and_sequence_controls_are_left_to_the_request() -> None:
    config = {
        **WARM_CONFIG,
        "modelWarmup": [
            {
                "name": "skipped",
                "batchSize": 0,
                "inputs": {"INPUT": {"dataType": "TYPE_FP32", "dims": [4], "randomData": True}},
            },
            {
                "name": "used",
                "batchSize": 1,
                "inputs": {
                    "INPUT": {"dataType": "TYPE_FP32", "dims": [4], "zeroData": True},
                    "START": {"dataType": "TYPE_INT32", "dims": [1], "zeroData": True},
                },
            },
        ],
    }
    request = sample_request(parse_model_config(config), None, NO_FILES.get, np.random.default_rng())
    assert isinstance(request, SampleRequest) and request.source == "warm-up 'used'"
    assert [given.name for given in request.inputs] == ["INPUT"]


def test_probe_inputs_come_first_a_string_fills_its_tensor_and_a_list_takes_the_shape() -> None:
    probe = {
        "inputs": [
            {"name": "MODEL_NAME", "datatype": "BYTES", "shape": [2, 1], "data": "add_sub"},
            {"name": "INPUT0", "datatype": "FP32", "shape": [2, 2], "data": [1, 2, 3, 4]},
        ]
    }
    warmed = {
        **BLS_CONFIG,
        "modelWarmup": [
            {
                "name": "w",
                "batchSize": 1,
                "inputs": {"INPUT0": {"dataType": "TYPE_FP32", "dims": [2], "zeroData": True}},
            }
        ],
    }
    model = TritonModel.model_validate(model_document(warmed, rollout={"probe": probe}))
    assert model.spec.rollout is not None
    request = sample_request(
        parse_model_config(warmed), model.spec.rollout.probe.inputs, NO_FILES.get, np.random.default_rng()
    )
    assert isinstance(request, SampleRequest) and request.source == "spec.rollout.probe.inputs"
    values = _values(request)
    assert values["MODEL_NAME"][0] == "BYTES" and values["MODEL_NAME"][1].tolist() == [[b"add_sub"], [b"add_sub"]]
    assert values["INPUT0"][1].dtype == np.float32 and values["INPUT0"][1].tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_generated_ones_fill_every_required_input_and_a_variable_dim() -> None:
    config = {**BLS_CONFIG, "input": BLS_CONFIG["input"][1:]}
    request = sample_request(parse_model_config(config), None, NO_FILES.get, np.random.default_rng())
    assert isinstance(request, SampleRequest) and request.source == "generated ones"
    assert {name: values.tolist() for name, (_, values) in _values(request).items()} == {"INPUT0": [[1.0] * 4]}


@pytest.mark.parametrize(
    ("config", "words"),
    [
        (
            BLS_CONFIG,
            "input 'MODEL_NAME' takes strings (a model name, a prompt), which generated data cannot stand for",
        ),
        (
            {
                "platform": "tensorrt_plan",
                "maxBatchSize": 0,
                "input": [{"name": "SHAPE", "dataType": "TYPE_INT32", "dims": [2], "isShapeTensor": True}],
                "output": BLS_CONFIG["output"],
            },
            "input 'SHAPE' is a shape tensor, whose values are shapes the model must take",
        ),
    ],
    ids=["string input", "shape tensor"],
)
def test_where_ones_mean_nothing_there_is_no_meaningful_sample_and_it_says_how_to_give_one(
    config: dict[str, Any], words: str
) -> None:
    request = sample_request(parse_model_config(config), None, NO_FILES.get, np.random.default_rng())
    assert isinstance(request, NoSample)
    assert words in request.reason and "spec.rollout.probe.inputs" in request.reason and "modelWarmup" in request.reason


def test_warmup_files_are_the_files_sent_with_the_load_or_else_the_model_s_folder(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "in.bin").write_bytes(b"from the folder")
    server = TritonServer.model_validate(
        {
            **SERVER,
            "metadata": {"name": "triton", "namespace": "default"},
            "spec": {**SERVER["spec"], "modelRepository": {"pvc": {"claimName": "models"}}},
        }
    )
    with_files = TritonModel.model_validate(
        model_document(
            WARM_CONFIG,
            files={
                "configMapRef": {
                    "name": "f",
                    "items": [{"key": "model.py", "path": "1/model.py"}, {"key": "in", "path": "warmup/in.bin"}],
                }
            },
        )
    )
    from_folder = TritonModel.model_validate(
        {**model_document(WARM_CONFIG, modelName="other"), "metadata": {"name": "other", "namespace": "default"}}
    )
    fleet = plan_fleet(
        [server], [with_files, from_folder], {("default", "f"): {"data": {"model.py": "x", "in": "sent with the load"}}}
    )
    rendered = {model.name: model for model in fleet.servers[0].models}
    assert model_file_reader(rendered["m"], tmp_path)("warmup/in.bin") == b"sent with the load"
    assert model_file_reader(rendered["other"], tmp_path)("warmup/in.bin") == b"from the folder"
    assert model_file_reader(rendered["other"], tmp_path)("warmup/none.bin") is None
