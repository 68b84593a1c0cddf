"""Each validation rule with a failing example: the Python check names the field and says what to do,
and where the CRD carries the rule as CEL, the API server (emulated) refuses the same object."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.crd_check import crd_errors
from tests.support.resources import BASE_CONFIG, VARIABLE_DIMS, model_document
from triton_operator.api.config_json import parse_model_config
from triton_operator.api.findings import errors
from triton_operator.api.parse import parse_resources
from triton_operator.api.resources import TritonModel
from triton_operator.api.server import TritonServerSpec
from triton_operator.api.server_checks import validate_against_server, validate_execution_env, validate_gpu_product
from triton_operator.api.validation import validate_model_config
from triton_operator.render.fleet import plan_fleet


def findings_for(config: dict[str, Any]) -> list:
    return validate_model_config(parse_model_config(config))


def test_base_config_is_valid_for_python_and_the_api_server() -> None:
    assert findings_for(BASE_CONFIG) == []
    assert crd_errors(model_document(BASE_CONFIG)) == []


def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node: Any = config
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    if value is DELETE:
        del node[last]
    elif last.isdigit() and int(last) == len(node):
        node.append(value)
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value


DELETE = object()

# (id, changes to BASE_CONFIG, finding path, words of the message, whether the CRD's CEL refuses it too)
RULES: list[tuple[str, dict[str, Any], str, str, bool]] = [
    (
        "negative max batch",
        {"maxBatchSize": -1, "dynamicBatching": DELETE},
        "spec.config.maxBatchSize",
        "must be >= 0",
        True,
    ),
    (
        "unknown platform",
        {"backend": DELETE, "platform": "custom"},
        "spec.config.platform",
        "unknown platform 'custom'",
        False,
    ),
    ("platform/backend pair", {"platform": "tensorrt_plan"}, "spec.config.platform", "does not go with backend", False),
    ("input without name", {"input.0.name": DELETE}, "spec.config.input[0].name", "needs a name", True),
    ("input without data type", {"input.0.dataType": DELETE}, "spec.config.input[0].dataType", "set a dataType", True),
    (
        "output without data type",
        {"output.0.dataType": "TYPE_INVALID"},
        "spec.config.output[0].dataType",
        "set a dataType",
        True,
    ),
    ("input without dims", {"input.0.dims": []}, "spec.config.input[0].dims", "set dims", True),
    ("zero dim", {"input.0.dims": [3, 0]}, "spec.config.input[0].dims[1]", "use a size >= 1, or -1", True),
    ("dim below -1", {"output.0.dims": [-2]}, "spec.config.output[0].dims[0]", "use a size >= 1, or -1", True),
    (
        "reshape dim zero",
        {"input.0.reshape": {"shape": [12, 0]}},
        "spec.config.input[0].reshape.shape[1]",
        "use a size >= 1",
        False,
    ),
    (
        "reshape element count",
        {"input.0.reshape": {"shape": [5, 2]}},
        "spec.config.input[0].reshape.shape",
        "must keep the element count",
        False,
    ),
    (
        "reshape variable vs fixed",
        {"input.0.dims": [3, -1], "input.0.reshape": {"shape": [12]}},
        "spec.config.input[0].reshape.shape",
        "must keep the element count",
        False,
    ),
    (
        "reshape variable dim count",
        {"input.0.dims": [-1, 4], "input.0.reshape": {"shape": [-1, 2, -1]}},
        "spec.config.input[0].reshape.shape",
        "as many variable (-1) dims",
        False,
    ),
    (
        "reshape variable segments",
        {"input.0.dims": [2, -1, 6], "input.0.reshape": {"shape": [3, -1, 4]}},
        "spec.config.input[0].reshape.shape",
        "same element counts",
        False,
    ),
    (
        "empty reshape needs one element",
        {"input.0.reshape": {}},
        "spec.config.input[0].reshape.shape",
        "empty reshape only fits dims of one element",
        False,
    ),
    (
        "empty reshape without batching",
        {"maxBatchSize": 0, "dynamicBatching": DELETE, "input.0.dims": [1], "input.0.reshape": {}},
        "spec.config.input[0].reshape.shape",
        "needs batching",
        False,
    ),
    (
        "NCHW needs 3 dims",
        {"input.0.format": "FORMAT_NCHW"},
        "spec.config.input[0].format",
        "needs exactly 3 dims",
        False,
    ),
    (
        "shape tensor off TensorRT",
        {"input.0.isShapeTensor": True},
        "spec.config.input[0].isShapeTensor",
        "tensorrt_plan",
        False,
    ),
    (
        "duplicate input names",
        {"input.1": {"name": "x", "dataType": "TYPE_FP32", "dims": [1]}},
        "spec.config.input",
        "used 2 times",
        False,
    ),
    (
        "preferred above max",
        {"dynamicBatching.preferredBatchSize": [4, 16]},
        "spec.config.dynamicBatching.preferredBatchSize[1]",
        "above maxBatchSize 8",
        True,
    ),
    (
        "preferred zero",
        {"dynamicBatching.preferredBatchSize": [0]},
        "spec.config.dynamicBatching.preferredBatchSize[0]",
        "must be >= 1",
        True,
    ),
    (
        "ragged without batching",
        {"maxBatchSize": 0, "dynamicBatching": DELETE, "input.0.allowRaggedBatch": True},
        "spec.config.input[0].allowRaggedBatch",
        "set maxBatchSize > 0",
        True,
    ),
    (
        "default priority out of range",
        {"dynamicBatching.priorityLevels": 2, "dynamicBatching.defaultPriorityLevel": 3},
        "spec.config.dynamicBatching.defaultPriorityLevel",
        "must be in 1..2",
        False,
    ),
    (
        "priority policy key out of range",
        {
            "dynamicBatching.priorityLevels": 2,
            "dynamicBatching.defaultPriorityLevel": 1,
            "dynamicBatching.priorityQueuePolicy": {"5": {"maxQueueSize": 4}},
        },
        "spec.config.dynamicBatching.priorityQueuePolicy.5",
        "must be in 1..2",
        False,
    ),
    (
        "preserve ordering with priorities",
        {
            "dynamicBatching.preserveOrdering": True,
            "dynamicBatching.priorityLevels": 2,
            "dynamicBatching.defaultPriorityLevel": 1,
        },
        "spec.config.dynamicBatching.preserveOrdering",
        "only one priority level",
        False,
    ),
    (
        "preserve ordering with DELAY",
        {
            "dynamicBatching.preserveOrdering": True,
            "dynamicBatching.defaultQueuePolicy": {"timeoutAction": "DELAY", "defaultTimeoutMicroseconds": 100},
        },
        "spec.config.dynamicBatching.defaultQueuePolicy.timeoutAction",
        "DELAY cannot be used",
        False,
    ),
    (
        "batch input two sources",
        {
            "batchInput": [
                {
                    "kind": "BATCH_ELEMENT_COUNT",
                    "targetName": ["N"],
                    "dataType": "TYPE_INT32",
                    "sourceInput": ["x", "x"],
                }
            ]
        },
        "spec.config.batchInput[0].sourceInput",
        "exactly 1 source input, got 2",
        False,
    ),
    (
        "batch input unknown source",
        {
            "batchInput": [
                {"kind": "BATCH_ITEM_SHAPE", "targetName": ["S"], "dataType": "TYPE_INT32", "sourceInput": ["nope"]}
            ]
        },
        "spec.config.batchInput[0].sourceInput",
        "'nope' is not an input",
        False,
    ),
    (
        "batch input no target",
        {"batchInput": [{"kind": "BATCH_ITEM_SHAPE", "dataType": "TYPE_INT32", "sourceInput": ["x"]}]},
        "spec.config.batchInput[0].targetName",
        "name the tensor",
        False,
    ),
    (
        "batch input data type",
        {
            "batchInput": [
                {"kind": "BATCH_ITEM_SHAPE", "targetName": ["S"], "dataType": "TYPE_INT64", "sourceInput": ["x"]}
            ]
        },
        "spec.config.batchInput[0].dataType",
        "TYPE_INT32 or TYPE_FP32",
        False,
    ),
    (
        "batch output unknown target",
        {"batchOutput": [{"kind": "BATCH_SCATTER_WITH_INPUT_SHAPE", "targetName": ["z"], "sourceInput": ["x"]}]},
        "spec.config.batchOutput[0].targetName",
        "'z' is not an output",
        False,
    ),
    (
        "batch output target twice",
        {"batchOutput": [{"kind": "BATCH_SCATTER_WITH_INPUT_SHAPE", "targetName": ["y", "y"], "sourceInput": ["x"]}]},
        "spec.config.batchOutput[0].targetName",
        "may be named once",
        False,
    ),
    (
        "sequence control kind twice",
        {
            "dynamicBatching": DELETE,
            "sequenceBatching": {
                "controlInput": [
                    {"name": "START", "control": [{"kind": "CONTROL_SEQUENCE_START", "int32FalseTrue": [0, 1]}]},
                    {"name": "START2", "control": [{"kind": "CONTROL_SEQUENCE_START", "int32FalseTrue": [0, 1]}]},
                ]
            },
        },
        "spec.config.sequenceBatching.controlInput[1].control[0].kind",
        "more than once",
        False,
    ),
    (
        "sequence control tensor twice",
        {
            "dynamicBatching": DELETE,
            "sequenceBatching": {
                "controlInput": [
                    {"name": "C", "control": [{"kind": "CONTROL_SEQUENCE_START", "int32FalseTrue": [0, 1]}]},
                    {"name": "C", "control": [{"kind": "CONTROL_SEQUENCE_END", "int32FalseTrue": [0, 1]}]},
                ]
            },
        },
        "spec.config.sequenceBatching.controlInput[0].name",
        "more than one controlInput",
        False,
    ),
    (
        "sequence control without values",
        {
            "dynamicBatching": DELETE,
            "sequenceBatching": {"controlInput": [{"name": "READY", "control": [{"kind": "CONTROL_SEQUENCE_READY"}]}]},
        },
        "spec.config.sequenceBatching.controlInput[0].control[0]",
        "needs exactly one of int32FalseTrue",
        False,
    ),
    (
        "sequence control three values",
        {
            "dynamicBatching": DELETE,
            "sequenceBatching": {
                "controlInput": [
                    {"name": "END", "control": [{"kind": "CONTROL_SEQUENCE_END", "fp32FalseTrue": [0, 1, 2]}]}
                ]
            },
        },
        "spec.config.sequenceBatching.controlInput[0].control[0].fp32FalseTrue",
        "exactly 2 values",
        False,
    ),
    (
        "corrid without type",
        {
            "dynamicBatching": DELETE,
            "sequenceBatching": {
                "controlInput": [{"name": "CORRID", "control": [{"kind": "CONTROL_SEQUENCE_CORRID"}]}]
            },
        },
        "spec.config.sequenceBatching.controlInput[0].control[0].dataType",
        "TYPE_UINT64",
        False,
    ),
    (
        "corrid with values",
        {
            "dynamicBatching": DELETE,
            "sequenceBatching": {
                "controlInput": [
                    {
                        "name": "CORRID",
                        "control": [
                            {"kind": "CONTROL_SEQUENCE_CORRID", "dataType": "TYPE_UINT64", "int32FalseTrue": [0, 1]}
                        ],
                    }
                ]
            },
        },
        "spec.config.sequenceBatching.controlInput[0].control[0]",
        "takes a dataType",
        False,
    ),
    (
        "oldest preferred above max",
        {"dynamicBatching": DELETE, "sequenceBatching": {"oldest": {"preferredBatchSize": [9]}}},
        "spec.config.sequenceBatching.oldest.preferredBatchSize[0]",
        "1..maxBatchSize",
        False,
    ),
    (
        "sequence with response cache",
        {"dynamicBatching": DELETE, "sequenceBatching": {}, "responseCache": {"enable": True}},
        "spec.config.responseCache.enable",
        "does not work with sequence batching",
        False,
    ),
    (
        "ensemble scheduling off ensemble",
        {
            "ensembleScheduling": {"step": [{"modelName": "a", "inputMap": {"x": "x"}, "outputMap": {"y": "y"}}]},
            "dynamicBatching": DELETE,
        },
        "spec.config.ensembleScheduling",
        "only for platform 'ensemble'",
        True,
    ),
    (
        "ensemble without scheduling",
        {"backend": DELETE, "platform": "ensemble", "instanceGroup": DELETE},
        "spec.config.ensembleScheduling",
        "needs ensembleScheduling.step",
        True,
    ),
    (
        "ensemble with instance group",
        {
            "backend": DELETE,
            "platform": "ensemble",
            "dynamicBatching": DELETE,
            "ensembleScheduling": {"step": [{"modelName": "a", "inputMap": {"x": "x"}, "outputMap": {"y": "y"}}]},
        },
        "spec.config.instanceGroup",
        "no instances of its own",
        False,
    ),
    (
        "ensemble step without model",
        {
            "backend": DELETE,
            "platform": "ensemble",
            "instanceGroup": DELETE,
            "dynamicBatching": DELETE,
            "ensembleScheduling": {"step": [{"inputMap": {"x": "x"}, "outputMap": {"y": "y"}}]},
        },
        "spec.config.ensembleScheduling.step[0].modelName",
        "must be set",
        False,
    ),
    (
        "ensemble tensor written twice",
        {
            "backend": DELETE,
            "platform": "ensemble",
            "instanceGroup": DELETE,
            "dynamicBatching": DELETE,
            "ensembleScheduling": {
                "step": [
                    {"modelName": "a", "inputMap": {"x": "x"}, "outputMap": {"y": "y"}},
                    {"modelName": "b", "inputMap": {"x": "x"}, "outputMap": {"z": "y"}},
                ]
            },
        },
        "spec.config.ensembleScheduling.step[1].outputMap",
        "already written by step 0",
        False,
    ),
    (
        "warmup on ensemble",
        {
            "backend": DELETE,
            "platform": "ensemble",
            "instanceGroup": DELETE,
            "dynamicBatching": DELETE,
            "modelWarmup": [
                {
                    "name": "w",
                    "batchSize": 1,
                    "inputs": {"x": {"dataType": "TYPE_FP32", "dims": [3, 4], "zeroData": True}},
                }
            ],
            "ensembleScheduling": {"step": [{"modelName": "a", "inputMap": {"x": "x"}, "outputMap": {"y": "y"}}]},
        },
        "spec.config.modelWarmup",
        "does not warm up ensembles",
        False,
    ),
    ("CPU group with gpus", {"instanceGroup.0.gpus": [0]}, "spec.config.instanceGroup[0].gpus", "runs on no GPU", True),
    (
        "negative gpu id",
        {"instanceGroup": [{"kind": "KIND_GPU", "gpus": [-1]}]},
        "spec.config.instanceGroup[0].gpus[0]",
        "GPU ids start at 0",
        True,
    ),
    (
        "negative instance count",
        {"instanceGroup.0.count": -2},
        "spec.config.instanceGroup[0].count",
        "count >= 1",
        True,
    ),
    (
        "profile off TensorRT",
        {"instanceGroup.0.profile": ["0"]},
        "spec.config.instanceGroup[0].profile",
        "tensorrt_plan",
        False,
    ),
    (
        "warmup variable dims",
        {
            "modelWarmup": [
                {
                    "name": "w",
                    "batchSize": 1,
                    "inputs": {"x": {"dataType": "TYPE_FP32", "dims": [3, -1], "zeroData": True}},
                }
            ]
        },
        "spec.config.modelWarmup[0].inputs.x.dims",
        "every dim fixed",
        False,
    ),
    (
        "warmup without data",
        {"modelWarmup": [{"name": "w", "batchSize": 1, "inputs": {"x": {"dataType": "TYPE_FP32", "dims": [3, 4]}}}]},
        "spec.config.modelWarmup[0].inputs.x",
        "zeroData, randomData or inputDataFile",
        False,
    ),
    (
        "warmup batch above max",
        {
            "modelWarmup": [
                {
                    "name": "w",
                    "batchSize": 9,
                    "inputs": {"x": {"dataType": "TYPE_FP32", "dims": [3, 4], "zeroData": True}},
                }
            ]
        },
        "spec.config.modelWarmup[0].batchSize",
        "above maxBatchSize 8",
        False,
    ),
    (
        "decoupled with cache",
        {"modelTransactionPolicy": {"decoupled": True}, "responseCache": {"enable": True}},
        "spec.config.responseCache.enable",
        "decoupled",
        False,
    ),
    (
        "latest zero versions",
        {"versionPolicy": {"latest": {"numVersions": 0}}},
        "spec.config.versionPolicy.latest.numVersions",
        "loads no version",
        False,
    ),
    (
        "python FORCE_CPU value",
        {"backend": "python", "parameters": {"FORCE_CPU_ONLY_INPUT_TENSORS": {"stringValue": "false"}}},
        "spec.config.parameters.FORCE_CPU_ONLY_INPUT_TENSORS.stringValue",
        "exactly 'yes' or 'no'",
        False,
    ),
]


@pytest.mark.parametrize(
    ("changes", "path", "words", "cel"), [rule[1:] for rule in RULES], ids=[rule[0] for rule in RULES]
)
def test_rule_rejects_with_a_message_naming_the_field(
    changes: dict[str, Any], path: str, words: str, cel: bool
) -> None:
    config = copy.deepcopy(BASE_CONFIG)
    for dotted, value in changes.items():
        _set(config, dotted, value)
    found = errors(findings_for(config))
    assert any(f.path == path and words in f.message for f in found), found
    api_server = crd_errors(model_document(config))
    if cel:
        assert api_server, "the CRD's CEL rules should refuse this too"
    else:
        assert not [e for e in api_server if "config" not in e or "Additional" in e], api_server


def test_unknown_config_field_names_its_path_and_a_close_match() -> None:
    config = {**BASE_CONFIG, "dynamicBatching": {"preferedBatchSize": [4]}}
    _servers, models, found = parse_resources([model_document(config)])
    assert models == []
    [finding] = found
    assert finding.where == "TritonModel/default/m: spec.config.dynamicBatching.preferedBatchSize"
    assert "did you mean 'preferredBatchSize'" in finding.message
    assert any("preferedBatchSize" in e for e in crd_errors(model_document(config)))


def test_two_members_of_a_oneof_are_refused() -> None:
    config = {**BASE_CONFIG, "sequenceBatching": {}}
    _, _, [finding] = parse_resources([model_document(config)])
    assert finding.where == "TritonModel/default/m: spec.config"
    assert finding.message == "set at most one of: dynamicBatching, sequenceBatching"
    assert any("set at most one of: dynamicBatching, sequenceBatching" in e for e in crd_errors(model_document(config)))


def test_bad_enum_value_is_rejected_with_the_proto_message() -> None:
    config = copy.deepcopy(BASE_CONFIG)
    config["input"][0]["dataType"] = "TYPE_FLOAT"
    _, _, found = parse_resources([model_document(config)])
    assert found and "TYPE_FLOAT" in found[0].message and found[0].path == "spec.config.input[0].dataType"
    assert crd_errors(model_document(config))


def test_dynamic_batching_without_batching_warns_that_nothing_can_batch() -> None:
    [warning] = findings_for({**BASE_CONFIG, "maxBatchSize": 0, "dynamicBatching": {"maxQueueDelayMicroseconds": 100}})
    assert warning.severity == "warning" and warning.path == "spec.config.dynamicBatching"
    assert "does nothing with maxBatchSize 0" in warning.message and "remove dynamicBatching" in warning.message


def test_variable_dims_without_ragged_warns() -> None:
    [warning] = findings_for(VARIABLE_DIMS)
    assert warning.severity == "warning"
    assert warning.path == "spec.config.input[0].allowRaggedBatch"
    assert "will not be batched together" in warning.message and "allowRaggedBatch: true" in warning.message


def test_variable_dims_with_ragged_batching_has_no_warning() -> None:
    config = copy.deepcopy(VARIABLE_DIMS)
    config["input"][0]["allowRaggedBatch"] = True
    assert findings_for(config) == []


def test_python_kind_gpu_warns_that_the_code_must_place_tensors() -> None:
    config = {
        **VARIABLE_DIMS,
        "input": [{**VARIABLE_DIMS["input"][0], "allowRaggedBatch": True}],
        "instanceGroup": [{"kind": "KIND_GPU"}],
    }
    [warning] = findings_for(config)
    assert warning.path == "spec.config.instanceGroup[0].kind"
    assert "must put its model and tensors on the GPU itself" in warning.message
    assert "FORCE_CPU_ONLY_INPUT_TENSORS" in warning.message
    config["parameters"] = {"FORCE_CPU_ONLY_INPUT_TENSORS": {"stringValue": "no"}}
    [warning] = findings_for(config)
    assert "FORCE_CPU_ONLY_INPUT_TENSORS" not in warning.message


def test_python_model_without_inputs_or_outputs_warns_to_import_it() -> None:
    """The operator's servers never call model.py's auto_complete_config: the config must name its tensors."""
    [warning] = findings_for({"backend": "python"})
    assert warning.severity == "warning" and warning.path == "spec.config.input"
    assert (
        "a python model with no inputs and outputs" in warning.message and "`triton-operator import`" in warning.message
    )
    [warning] = findings_for({**BASE_CONFIG, "backend": "python", "output": []})
    assert warning.path == "spec.config.output" and "a python model with no outputs:" in warning.message
    assert findings_for({"backend": "onnxruntime"}) == [], "other backends take theirs from the model file"


def _server(**spec: Any) -> TritonServerSpec:
    return TritonServerSpec.model_validate(spec)


def test_no_backend_or_platform_warns_that_triton_will_guess() -> None:
    config = {key: value for key, value in BASE_CONFIG.items() if key != "backend"}
    [warning] = findings_for(config)
    assert warning.severity == "warning" and warning.path == "spec.config.backend"
    assert "guess one from the model files" in warning.message


def test_a_known_platform_implies_its_backend() -> None:
    config = {key: value for key, value in BASE_CONFIG.items() if key != "backend"} | {"platform": "onnxruntime_onnx"}
    assert findings_for(config) == []
    [error] = validate_against_server(parse_model_config(config), _server(backends=["python"]), has_files=True)
    assert "'onnxruntime' is not among the server's backends" in error.message


def test_backend_missing_from_server_image_is_refused() -> None:
    """Refused, as the server's spec.backends says, and as local mode then does too (it serves what validates)."""
    found = validate_against_server(parse_model_config(BASE_CONFIG), _server(backends=["python"]), has_files=True)
    [error] = found
    assert error.severity == "error" and error.path == "spec.config.backend"
    assert (
        "'onnxruntime' is not among the server's backends (python): its Triton cannot load the model" in error.message
    )


@pytest.mark.parametrize(
    ("group", "gpus", "path", "words"),
    [
        ({"kind": "KIND_GPU", "gpus": [2]}, 2, "spec.config.instanceGroup[0].gpus[0]", "GPU 2 does not exist"),
        ({"kind": "KIND_GPU"}, 0, "spec.config.instanceGroup[0].kind", "the server has none"),
    ],
)
def test_gpu_ids_are_checked_against_the_server(group: dict[str, Any], gpus: int, path: str, words: str) -> None:
    config = {**BASE_CONFIG, "instanceGroup": [group]}
    found = errors(validate_against_server(parse_model_config(config), _server(gpus={"count": gpus}), has_files=True))
    assert any(f.path == path and words in f.message for f in found), found


def test_gpu_ids_within_the_server_are_fine() -> None:
    config = {**BASE_CONFIG, "instanceGroup": [{"kind": "KIND_GPU", "gpus": [0, 1]}]}
    assert validate_against_server(parse_model_config(config), _server(gpus={"count": 2}), has_files=True) == []


# Where the models of these tests, which come without files, load from.
REPOSITORY = {"modelRepository": {"pvc": {"claimName": "models"}}}


def _server_document(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonServer",
        "metadata": {"name": "triton", "namespace": "default"},
        "spec": REPOSITORY | spec,
    }


def test_shm_request_beyond_a_fixed_dev_shm_warns_on_the_server() -> None:
    config = {
        **BASE_CONFIG,
        "backend": "python",
        "input": [{"name": "x", "dataType": "TYPE_FP32", "dims": [1024, 1024]}],
    }
    documents = [_server_document(sharedMemory={"sizeLimit": "64Mi"}), model_document(config)]
    servers, models, _found = parse_resources(documents)
    fleet = plan_fleet(servers, models)
    warnings = [f for f in fleet.findings if f.severity == "warning"]
    assert [f.where for f in warnings] == ["TritonServer/default/triton: spec.sharedMemory.sizeLimit"]
    assert "the models need" in warnings[0].message and "raise it or use 'auto'" in warnings[0].message


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"gpus": {"count": 1}}, []),
        ({"gpus": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}}, []),
        (
            {
                "gpus": {"count": 1, "product": "NVIDIA-L4"},
                "pod": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4", "zone": "a"}},
            },
            [],
        ),
        (
            {"gpus": {"count": 1, "product": "NVIDIA-B200"}},
            ["'NVIDIA-B200' is not a GPU whose memory the operator knows", "NVIDIA-H100-80GB-HBM3, NVIDIA-H200"],
        ),
        ({"gpus": {"count": 1, "product": "NVIDIA-B200"}, "capacity": {"gpuMemory": "180Gi"}}, []),
        (
            {
                "gpus": {"count": 1, "product": "NVIDIA-L4"},
                "pod": {"nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4"}},
            },
            ["is 'NVIDIA-L4', and spec.pod.nodeSelector sets nvidia.com/gpu.product to 'Tesla-T4', which wins"],
        ),
    ],
    ids=["no-product", "known", "same-in-node-selector", "unknown", "unknown-with-capacity", "node-selector-differs"],
)
def test_a_gpu_product_warns_where_its_memory_is_unknown_or_the_node_selector_says_otherwise(
    spec: dict[str, Any], words: list[str]
) -> None:
    found = validate_gpu_product(_server(**spec))
    assert [(f.severity, f.path) for f in found] == [("warning", "spec.gpus.product")] * bool(words)
    assert all(word in found[0].message for word in words), found


def test_the_gpu_product_warning_is_the_servers() -> None:
    servers, models, _ = parse_resources([_server_document(gpus={"count": 1, "product": "NVIDIA-B200"})])
    assert [(f.severity, f.where) for f in plan_fleet(servers, models).findings] == [
        ("warning", "TritonServer/default/triton: spec.gpus.product")
    ]


def test_python_model_with_variable_dims_asks_for_execution_bytes() -> None:
    config = {**VARIABLE_DIMS, "input": [{**VARIABLE_DIMS["input"][0], "allowRaggedBatch": True}]}
    servers, models, _ = parse_resources([_server_document(), model_document(config)])
    fleet = plan_fleet(servers, models)
    assert [f.where for f in fleet.findings] == ["TritonModel/default/m: spec.sharedMemory.executionBytes"]
    servers, models, _ = parse_resources(
        [_server_document(), model_document(config, sharedMemory={"executionBytes": "4Mi"})]
    )
    assert plan_fleet(servers, models).findings == []


@pytest.mark.parametrize(
    ("spec", "path", "words", "cel"),
    [
        (
            {"config": BASE_CONFIG},
            "spec",
            "exactly one of serverRef (a shared TritonServer), server (a dedicated one) or serverSelector",
            True,
        ),
        ({"serverRef": {"name": "a"}, "server": {}, "config": BASE_CONFIG}, "spec", "exactly one of serverRef", True),
        (
            {"serverRef": {"name": "a"}, "serverSelector": {}, "config": BASE_CONFIG},
            "spec",
            "serverRef and serverSelector are set",
            True,
        ),
        (
            {"server": {}, "serverSelector": {"matchLabels": {"pool": "a"}}, "config": BASE_CONFIG},
            "spec",
            "server and serverSelector are set",
            True,
        ),
        (
            {"serverRef": {"name": "a"}, "server": {}, "serverSelector": {}, "config": BASE_CONFIG},
            "spec",
            "serverRef and server and serverSelector are set",
            True,
        ),
        (
            {"serverSelector": {"matchExpressions": [{"key": "pool", "operator": "In"}]}, "config": BASE_CONFIG},
            "spec.serverSelector.matchExpressions.0",
            "In needs values",
            True,
        ),
        (
            {
                "serverSelector": {"matchExpressions": [{"key": "pool", "operator": "Exists", "values": ["a"]}]},
                "config": BASE_CONFIG,
            },
            "spec.serverSelector.matchExpressions.0",
            "Exists takes no values",
            True,
        ),
        (
            {"serverSelector": {"matchExpressions": [{"key": "pool", "operator": "Near"}]}, "config": BASE_CONFIG},
            "spec.serverSelector.matchExpressions.0.operator",
            "'In', 'NotIn', 'Exists' or 'DoesNotExist'",
            True,
        ),
        (
            {"serverSelector": {}, "memory": {"cpu": "2.5"}, "config": BASE_CONFIG},
            "spec.memory.cpu",
            "whole, non-negative number of bytes",
            False,
        ),
        (
            {"serverRef": {"name": "a"}, "modelName": "a/b", "config": BASE_CONFIG},
            "spec.modelName",
            "'a/b' cannot be a Triton model name",
            True,
        ),
        (
            {
                "serverRef": {"name": "a"},
                "config": BASE_CONFIG,
                "files": {"configMapRef": {"name": "f", "items": [{"key": "k", "path": "../x.py"}]}},
            },
            "spec.files.configMapRef.items.0.path",
            "relative path inside the model directory",
            True,
        ),
        (
            {
                "serverRef": {"name": "a"},
                "config": BASE_CONFIG,
                "files": {"configMapRef": {"name": "f", "items": [{"key": "k", "path": "/abs.py"}]}},
            },
            "spec.files.configMapRef.items.0.path",
            "relative path inside the model directory",
            True,
        ),
        (
            {
                "serverRef": {"name": "a"},
                "config": BASE_CONFIG,
                "files": {"configMapRef": {"name": "f", "items": [{"key": "k", "path": "config.pbtxt"}]}},
            },
            "spec.files.configMapRef.items.0.path",
            "rendered from spec.config",
            True,
        ),
        (
            {
                "serverRef": {"name": "a"},
                "config": BASE_CONFIG,
                "files": {
                    "configMapRef": {
                        "name": "f",
                        "items": [{"key": "k", "path": "1/m.py"}, {"key": "j", "path": "1/m.py"}],
                    }
                },
            },
            "spec.files.configMapRef.items",
            "repeated: 1/m.py",
            True,
        ),
        (
            {
                "serverRef": {"name": "a"},
                "config": BASE_CONFIG,
                "sharedMemory": {"clientPool": {"regions": 2, "regionBytes": "lots"}},
            },
            "spec.sharedMemory.clientPool.regionBytes",
            "not a byte count",
            True,
        ),
        (
            {"server": {"replicas": 3, "autoscaling": {"maxReplicas": 4}}, "config": BASE_CONFIG},
            "spec",
            "leave server.replicas out when server.autoscaling is set",
            True,
        ),
    ],
)
def test_model_spec_rules(spec: dict[str, Any], path: str, words: str, cel: bool) -> None:
    document = {**model_document({}), "spec": spec}
    _, models, found = parse_resources([document])
    assert models == []
    assert any(f.where == f"TritonModel/default/m: {path}" and words in f.message for f in found), found
    if cel:
        assert crd_errors(document)


@pytest.mark.parametrize(
    ("spec", "path", "words", "cel"),
    [
        (
            {"modelRepository": {"pvc": {"claimName": "c"}, "uri": "s3://b/m"}},
            "spec.modelRepository",
            "either pvc or uri",
            True,
        ),
        (
            {"modelRepository": {"credentialsSecretRef": {"name": "s"}}},
            "spec.modelRepository",
            "only used with uri",
            True,
        ),
        ({"modelRepository": {"uri": "http://x"}}, "spec.modelRepository.uri", "pattern", True),
        ({"extraArgs": ["--model-control-mode=poll"]}, "spec.extraArgs", "the operator sets these flags", True),
        (
            {"pythonBackend": {"shmDefaultBytes": "512Ki"}},
            "spec.pythonBackend.shmDefaultBytes",
            "greater than or equal to 1048576",
            False,
        ),
        ({"replicas": -1}, "spec.replicas", "greater than or equal to 0", False),
        (
            {"memoryPools": {"pinnedBytes": "1.5"}},
            "spec.memoryPools.pinnedBytes",
            "whole, non-negative number of bytes",
            False,
        ),
        (
            {"autoscaling": {"minReplicas": 5, "maxReplicas": 2}},
            "spec.autoscaling.maxReplicas",
            "below minReplicas (5): lower spec.autoscaling.minReplicas or raise spec.autoscaling.maxReplicas",
            True,
        ),
        (
            {"autoscaling": {"minReplicas": 0, "maxReplicas": 2}},
            "spec.autoscaling.minReplicas",
            "greater than or equal to 1",
            True,
        ),
        ({"autoscaling": {"minReplicas": 2}}, "spec.autoscaling.maxReplicas", "Field required", True),
        (
            {"autoscaling": {"maxReplicas": 2, "target": {}}},
            "spec.autoscaling.target",
            "exactly one of queueMicrosecondsPerRequest or pendingRequestsPerPod",
            True,
        ),
        (
            {
                "autoscaling": {
                    "maxReplicas": 2,
                    "target": {"queueMicrosecondsPerRequest": 50, "pendingRequestsPerPod": 4},
                }
            },
            "spec.autoscaling.target",
            "exactly one of",
            True,
        ),
        (
            {"autoscaling": {"maxReplicas": 2, "engine": "keda"}},
            "spec.autoscaling.keda",
            "engine: keda needs keda.serverAddress",
            True,
        ),
        (
            {"autoscaling": {"maxReplicas": 2, "keda": {"serverAddress": "http://prometheus:9090"}}},
            "spec.autoscaling.keda",
            "only used with engine: keda",
            True,
        ),
        (
            {"autoscaling": {"maxReplicas": 2, "engine": "keda", "keda": {"serverAddress": "prometheus:9090"}}},
            "spec.autoscaling.keda.serverAddress",
            "pattern",
            True,
        ),
        (
            {"autoscaling": {"maxReplicas": 2, "scaleDownStabilizationSeconds": 7200}},
            "spec.autoscaling.scaleDownStabilizationSeconds",
            "less than or equal to 3600",
            True,
        ),
        (
            {"grpc": {"maxConnectionAgeGraceMs": 2000}},
            "spec.drain",
            "grpc.maxConnectionAgeGraceMs (2000) is below drain.maxRequestSeconds (120 s)",
            True,
        ),
        (
            {"grpc": {"maxConnectionAgeGraceMs": 29_999}, "drain": {"maxRequestSeconds": 30}},
            "spec.drain",
            "lower drain.maxRequestSeconds",
            True,
        ),
        ({"drain": {"maxRequestSeconds": 0}}, "spec.drain.maxRequestSeconds", "greater than or equal to 1", True),
        ({"service": {"type": "LoadBalancer"}}, "spec.service", "set service.exposeOutsideCluster: true", True),
        (
            {"service": {"type": "NodePort", "exposeOutsideCluster": False}},
            "spec.service",
            "set service.exposeOutsideCluster: true",
            True,
        ),
    ],
)
def test_server_spec_rules(spec: dict[str, Any], path: str, words: str, cel: bool) -> None:
    document = _server_document(**spec)
    servers, _, found = parse_resources([document])
    assert servers == []
    assert any(f.where == f"TritonServer/default/triton: {path}" and words in f.message for f in found), found
    if cel:
        assert crd_errors(document)


@pytest.mark.parametrize(
    "spec",
    [
        {"grpc": {"maxConnectionAgeGraceMs": 120_000}},
        {"grpc": {"maxConnectionAgeGraceMs": 5000}, "drain": {"maxRequestSeconds": 5}},
        {"grpc": {"maxConnectionAgeMs": 0, "maxConnectionAgeGraceMs": 5000}},
        {"drain": {"maxRequestSeconds": 600}},
    ],
    ids=["grace-covers-the-default", "grace-covers-short-requests", "age-off", "grace-unset"],
)
def test_a_connection_age_grace_covering_the_longest_request_is_accepted(spec: dict[str, Any]) -> None:
    """Both checks, pydantic's and the CRD's CEL, accept what the refusals above leave out."""
    document = _server_document(**spec)
    servers, _, found = parse_resources([document])
    assert found == [] and len(servers) == 1
    assert crd_errors(document) == []


def test_config_name_must_match_model_name() -> None:
    documents = [_server_document(), model_document({**BASE_CONFIG, "name": "other"})]
    fleet = plan_fleet(*parse_resources(documents)[:2])
    assert [(f.where, f.severity) for f in fleet.findings] == [("TritonModel/default/m: spec.config.name", "error")]
    assert fleet.servers[0].models == ()


def test_a_bad_model_is_left_out_and_the_good_ones_stay() -> None:
    good = model_document(BASE_CONFIG)
    bad = copy.deepcopy(model_document({**BASE_CONFIG, "maxBatchSize": 2}))
    bad["metadata"]["name"] = "bad"
    fleet = plan_fleet(*parse_resources([_server_document(), good, bad])[:2])
    assert [r.model.name for r in fleet.servers[0].models] == ["m"]
    assert all(f.obj == "TritonModel/default/bad" for f in fleet.errors)


def test_two_models_with_one_triton_name_on_a_server_are_refused() -> None:
    first = model_document(BASE_CONFIG, modelName="same")
    second = copy.deepcopy(first)
    second["metadata"]["name"] = "other"
    fleet = plan_fleet(*parse_resources([_server_document(), first, second])[:2])
    assert any("already serves 'same'" in f.message for f in fleet.errors)


def test_model_whose_server_is_missing_is_checked_alone_and_waits() -> None:
    fleet = plan_fleet(*parse_resources([model_document(BASE_CONFIG)])[:2])
    assert fleet.errors == [] and fleet.servers == []
    [warning] = fleet.findings
    assert warning.where == "TritonModel/default/m: spec.serverRef.name" and "not against the server" in warning.message
    assert [r.model.name for r in fleet.unbound] == ["m"]
    broken = plan_fleet(*parse_resources([model_document({**BASE_CONFIG, "maxBatchSize": -1})])[:2])
    assert "spec.config.maxBatchSize" in [f.path for f in broken.errors] and broken.unbound == []


def test_inline_server_becomes_a_child_named_after_the_model() -> None:
    server = {"replicas": 3, "modelRepository": {"uri": "s3://models/m"}}  # a model's own server takes no volume
    document = {**model_document(BASE_CONFIG), "spec": {"server": server, "config": BASE_CONFIG}}
    fleet = plan_fleet(*parse_resources([document])[:2])
    [rendered] = fleet.servers
    assert rendered.server.name == "m" and rendered.server.spec.replicas == 3
    assert rendered.owner is not None and rendered.owner.name == "m"
    assert isinstance(rendered.models[0].model, TritonModel)


def _files_model(key: str = "model.py") -> dict[str, Any]:
    return model_document(
        BASE_CONFIG, files={"configMapRef": {"name": "code", "items": [{"key": key, "path": "1/model.py"}]}}
    )


def test_model_files_must_resolve_to_a_config_map_and_its_keys() -> None:
    servers, models, _ = parse_resources([_server_document(), _files_model()])
    fleet = plan_fleet(servers, models, {})
    assert [(f.where, f.message) for f in fleet.errors] == [
        ("TritonModel/default/m: spec.files.configMapRef.name", "no ConfigMap 'code' in namespace 'default'")
    ]
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "code"}, "data": {"main.py": "x"}}
    servers, models, _ = parse_resources([_server_document(), _files_model()])
    fleet = plan_fleet(servers, models, {("default", "code"): config_map})
    [error] = fleet.errors
    assert (
        error.where == "TritonModel/default/m: spec.files.configMapRef.items[0].key"
        and "has no key 'model.py'; its keys: main.py" in error.message
    )
    assert fleet.refused == {"TritonModel/default/m"} and fleet.servers[0].models == ()
    servers, models, _ = parse_resources([_server_document(), _files_model("main.py")])
    fleet = plan_fleet(servers, models, {("default", "code"): config_map})
    assert fleet.errors == [] and fleet.servers[0].models[0].files == {"1/model.py": b"x"}


PYTHON_MODEL = {**VARIABLE_DIMS, "maxBatchSize": 0, "dynamicBatching": None}
ENV = "EXECUTION_ENV_PATH"


def env_findings(value: str, files: set[str] | None, backend: str = "python") -> list:
    config = {key: item for key, item in PYTHON_MODEL.items() if item is not None} | {
        "backend": backend,
        "parameters": {ENV: {"stringValue": value}},
    }
    return validate_execution_env(parse_model_config(config), files)


@pytest.mark.parametrize(
    ("value", "files", "backend", "severity", "words"),
    [
        ("$$TRITON_MODEL_DIRECTORY/env.tar.gz", None, "python", None, ""),  # the repository holds it: not ours to see
        ("$$TRITON_MODEL_DIRECTORY/env.tar.gz", {"1/model.py", "env.tar.gz"}, "python", None, ""),
        (
            "$$TRITON_MODEL_DIRECTORY/env",
            {"1/model.py", "env/bin/activate"},
            "python",
            None,
            "",
        ),  # an unpacked environment
        ("$$TRITON_MODEL_DIRECTORY/./envs/../env.tar.gz", {"env.tar.gz"}, "python", None, ""),
        (
            "$$TRITON_MODEL_DIRECTORY/env.tar.gz",
            {"1/model.py"},
            "python",
            "error",
            "'env.tar.gz' is not among the model's files (1/model.py)",
        ),
        ("$$TRITON_MODEL_DIRECTORY/../common/env.tar.gz", None, "python", "error", "outside the model's folder"),
        ("$$TRITON_MODEL_DIRECTORY/", None, "python", "error", "outside the model's folder"),
        ("env.tar.gz", None, "python", "error", "write '$$TRITON_MODEL_DIRECTORY/env.tar.gz'"),
        ("", {"1/model.py"}, "python", "error", "Failed to get the canonical path"),
        ("/opt/envs/torch.tar.gz", None, "python", "warning", "must be in the server's image (spec.image)"),
        ("$$TRITON_MODEL_DIRECTORY/env.tar.gz", None, "onnxruntime", "warning", "backend 'onnxruntime' ignores it"),
    ],
)
def test_an_execution_environment_must_be_where_triton_looks(
    value: str, files: set[str] | None, backend: str, severity: str | None, words: str
) -> None:
    findings = env_findings(value, files, backend)
    assert [finding.severity for finding in findings] == ([severity] if severity else [])
    assert all(
        finding.path == f"spec.config.parameters.{ENV}.stringValue" and words in finding.message for finding in findings
    ), findings


def test_a_model_whose_environment_is_missing_from_its_files_is_refused() -> None:
    model = model_document(
        {key: item for key, item in PYTHON_MODEL.items() if item is not None}
        | {"parameters": {ENV: {"stringValue": "$$TRITON_MODEL_DIRECTORY/env.tar.gz"}}},
        files={"configMapRef": {"name": "m-files", "items": [{"key": "model.py", "path": "1/model.py"}]}},
    )
    files = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "m-files", "namespace": "default"},
        "data": {"model.py": "pass"},
    }
    _, [model_object], parsing = parse_resources([model])
    assert parsing == []
    fleet = plan_fleet([], [model_object], {("default", "m-files"): files})
    assert any(ENV in finding.path and finding.severity == "error" for finding in fleet.findings), fleet.findings


@pytest.mark.parametrize("service_type", ["LoadBalancer", "NodePort"])
def test_a_service_outside_the_cluster_is_accepted_when_meant_and_warned_of(service_type: str) -> None:
    """exposeOutsideCluster: both checks accept it, and the fleet's findings say it out loud."""
    document = _server_document(service={"type": service_type, "exposeOutsideCluster": True})
    servers, _, found = parse_resources([document])
    assert found == [] and len(servers) == 1
    assert crd_errors(document) == []
    [warning] = plan_fleet(servers, [], {}).findings
    assert warning.severity == "warning" and warning.path == "spec.service.exposeOutsideCluster"
    assert f"Service type {service_type} exposes" in warning.message and "NetworkPolicy" in warning.message


def test_a_model_placed_by_selector_from_files_is_bound_to_the_server_placement_chooses() -> None:
    """The same rule as the operator's: on a matching server with room it is rendered and checked there;
    with none it is checked alone, and the warning says which servers were looked at and their room."""
    spec = {
        "serverSelector": {
            "matchLabels": {"pool": "cpu"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}],
        },
        "memory": {"cpu": "2Gi", "gpu": "1Gi"},
        "config": BASE_CONFIG,
    }
    document = {**model_document({}), "spec": spec}
    server = _server_document(capacity={"memory": "16Gi", "gpuMemory": "80Gi"})
    assert crd_errors(document) == [] and crd_errors(server) == []
    servers, models, found = parse_resources([server, document])
    assert found == [] and models[0].spec.memory.cpu == 2 << 30 and servers[0].spec.capacity.gpu_memory == 80 << 30
    fleet = plan_fleet(servers, models)
    assert [r.model.name for r in fleet.unbound] == ["m"] and [r.models for r in fleet.servers] == [()]
    assert [(f.severity, f.where) for f in fleet.findings] == [
        ("warning", "TritonModel/default/m: spec.serverSelector")
    ]
    assert "no TritonServer in namespace 'default' matches pool=cpu,tier in (a,b)" in fleet.findings[0].message
    assert "checked alone" in fleet.findings[0].message
    labelled = {**server, "metadata": {**server["metadata"], "labels": {"pool": "cpu", "tier": "a"}}}
    fleet = plan_fleet(*parse_resources([labelled, document])[:2])
    assert (
        fleet.unbound == []
        and [[r.model.name for r in s.models] for s in fleet.servers] == [["m"]]
        and fleet.findings == []
    )
    small = {**labelled, "spec": {**labelled["spec"], "capacity": {"memory": "1Gi"}}}
    fleet = plan_fleet(*parse_resources([small, document])[:2])
    assert [r.model.name for r in fleet.unbound] == ["m"]
    assert (
        "0/1 servers have room for 2Gi (Declared) and 1Gi of GPU memory: triton (1Gi free)" in fleet.findings[0].message
    )
