"""spec.config is Triton's ModelConfig: every field of the proto is accepted (by pydantic and by the
CRD schema), nothing else is, and the printed forms are deterministic."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from google.protobuf import json_format

from tests.support.config_fields import FIELD_PATHS, FieldDescriptor, nest, sample
from tests.support.crd_check import crd_errors
from triton_operator.api.config_json import ModelConfig, ModelConfigError, config_to_dict, parse_model_config
from triton_operator.protocol.desired import config_pbtxt, load_request_json


def test_the_proto_has_the_fields_we_rely_on() -> None:
    names = {".".join(f.json_name for f in path) for path in FIELD_PATHS}
    assert {
        "input.allowRaggedBatch",
        "dynamicBatching.priorityQueuePolicy.maxQueueSize",
        "modelWarmup.inputs.zeroData",
        "ensembleScheduling.step.inputMap",
    } <= names
    assert len(FIELD_PATHS) > 150


@pytest.mark.parametrize("path", FIELD_PATHS, ids=[".".join(f.json_name for f in p) for p in FIELD_PATHS])
def test_every_proto_field_is_accepted(path: tuple[FieldDescriptor, ...]) -> None:
    config = nest(path, sample(path[-1]))
    message = parse_model_config(config)
    assert message.ListFields(), "the field must be set on the parsed message"
    document = {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonModel",
        "metadata": {"name": "m"},
        "spec": {"serverRef": {"name": "s"}, "config": config},
    }
    schema_errors = [
        e for e in crd_errors(document) if "Additional properties" in e or "is not of type" in e or "is not one of" in e
    ]
    assert schema_errors == []


@pytest.mark.parametrize(
    ("config", "path", "words"),
    [
        ({"maxBatchSize": 1, "foo": 1}, "spec.config.foo", "ModelConfig has no such field"),
        ({"input": [{"name": "x", "dim": [1]}]}, "spec.config.input[0].dim", "did you mean 'dims'"),
        (
            {"parameters": {"k": {"stringvalue": "x"}}},
            "spec.config.parameters.k.stringvalue",
            "did you mean 'stringValue'",
        ),
        ({"input": {"name": "x"}}, "spec.config.input", "expected a list"),
        ({"parameters": ["x"]}, "spec.config.parameters", "expected a map"),
        (
            {"dynamicBatching": {}, "dynamic_batching": {}},
            "spec.config.dynamic_batching",
            "the same field as 'dynamicBatching': write it once",
        ),
        (
            {"input": [{"name": "x", "dims": [1], "dataType": "TYPE_FP32", "data_type": "TYPE_FP32"}]},
            "spec.config.input[0].data_type",
            "the same field as 'dataType'",
        ),
        (
            {"sequenceBatching": {"direct": {"minimumSlotUtilization": 10**400}}},
            "spec.config.sequenceBatching",
            "Fix the value",
        ),
    ],
)
def test_unknown_or_misshaped_fields_are_refused(config: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(ModelConfigError) as raised:
        parse_model_config(config)
    assert raised.value.path == path and words in raised.value.message


def test_snake_case_proto_names_are_accepted_too() -> None:
    assert parse_model_config({"max_batch_size": 4}).max_batch_size == 4


CONFIG = {
    "backend": "python",
    "maxBatchSize": 4,
    "input": [{"name": "a", "dataType": "TYPE_FP32", "dims": [-1, 3]}],
    "output": [{"name": "b", "dataType": "TYPE_INT64", "dims": [2]}],
    "parameters": {"z": {"stringValue": "1"}, "a": {"stringValue": "2"}, "m": {"stringValue": "3"}},
    "dynamicBatching": {
        "priorityLevels": 2,
        "defaultPriorityLevel": 1,
        "priorityQueuePolicy": {"2": {"maxQueueSize": 5}, "1": {"maxQueueSize": 3}},
    },
}


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: _shuffled(item, rng) for key, item in items}
    if isinstance(value, list):
        return [_shuffled(item, rng) for item in value]
    return value


def test_rendering_is_deterministic_whatever_the_key_order() -> None:
    expected = config_pbtxt(parse_model_config(CONFIG))
    rng = random.Random(4)
    for _ in range(20):
        shuffled = parse_model_config(_shuffled(CONFIG, rng))
        assert config_pbtxt(shuffled) == expected
        assert load_request_json(shuffled) == load_request_json(parse_model_config(CONFIG))


def test_load_json_and_pbtxt_are_the_same_message() -> None:
    message = parse_model_config(CONFIG)
    from_json = json_format.Parse(load_request_json(message), ModelConfig())
    assert from_json == message
    assert '"max_batch_size": 4' in load_request_json(message)  # proto names, as Triton documents


def test_config_to_dict_writes_64_bit_integers_as_numbers() -> None:
    data = config_to_dict(parse_model_config(CONFIG))
    assert data["input"][0]["dims"] == [-1, 3]
    assert data["dynamicBatching"]["priorityQueuePolicy"]["1"] == {"maxQueueSize": 3}
    assert parse_model_config(json.loads(json.dumps(data))) == parse_model_config(CONFIG)


def test_config_to_dict_writes_map_keys_sorted() -> None:
    keys = [f"key_{index:02d}" for index in range(30)]
    random.Random(7).shuffle(keys)
    message = ModelConfig()
    for key in keys:
        message.parameters[key].string_value = key
    assert list(config_to_dict(message)["parameters"]) == sorted(keys)
