"""spec.config is Triton's ModelConfig: every field of the proto is accepted (by pydantic and by the
CRD schema), nothing else is, and the printed forms are deterministic."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import descriptor as pb_descriptor
from google.protobuf import json_format, text_format

from tests.support.crd_check import crd_errors
from tests.support.fleet import TRITON_EXAMPLES, varied_fleet
from triton_operator.api import modelconfig
from triton_operator.api.modelconfig import ModelConfig, ModelConfigError, config_to_dict, parse_model_config
from triton_operator.protocol.desired import config_pbtxt, load_request_json

FieldDescriptor = pb_descriptor.FieldDescriptor


def _sample_scalar(field: FieldDescriptor) -> Any:
    if field.enum_type is not None:
        return field.enum_type.values[-1].name
    if field.type == FieldDescriptor.TYPE_BOOL:
        return True
    if field.type == FieldDescriptor.TYPE_STRING:
        return "1"
    if field.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return 0.5
    return 3


def _sample(field: FieldDescriptor) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name["value"]
        return {"1": _sample(value_field) if value_field.message_type else _sample_scalar(value_field)}
    value = {} if field.message_type is not None else _sample_scalar(field)
    return [value] if field.is_repeated else value


def _every_field_path(
    descriptor: pb_descriptor.Descriptor, prefix: tuple[FieldDescriptor, ...] = ()
) -> list[tuple[FieldDescriptor, ...]]:
    paths = []
    for field in descriptor.fields:
        paths.append((*prefix, field))
        message = field.message_type
        if message is not None and message.GetOptions().map_entry:
            message = message.fields_by_name["value"].message_type
        if message is not None:
            paths += _every_field_path(message, (*prefix, field))
    return paths


def _nest(path: tuple[FieldDescriptor, ...], value: Any) -> dict[str, Any]:
    """The smallest config that sets the last field of `path` to `value`, nested through its parents."""
    for depth in range(len(path) - 1, 0, -1):
        parent = path[depth - 1]
        node = {path[depth].json_name: value}
        if parent.message_type.GetOptions().map_entry:
            value = {"1": node}
        elif parent.is_repeated:
            value = [node]
        else:
            value = node
    return {path[0].json_name: value}


FIELD_PATHS = _every_field_path(ModelConfig.DESCRIPTOR)


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
    config = _nest(path, _sample(path[-1]))
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


def _outcome(parse: Any, config: Any) -> tuple[Any, ...]:
    """What parsing gives: the message (its bytes and its config.pbtxt), or the problems and the partial
    message, or another exception's type and text."""
    try:
        message = parse(copy.deepcopy(config))
    except ModelConfigError as error:
        partial = error.partial.SerializeToString(deterministic=True) if error.partial is not None else None
        return "refused", error.problems, partial
    except Exception as error:  # whatever protobuf's parser lets through, the fast path must too
        return "raised", type(error).__name__, str(error)
    return "parsed", message.SerializeToString(deterministic=True), text_format.MessageToString(message)


def _by_json_parser(config: Any) -> ModelConfig:
    return modelconfig._parse_json_mapping(config, "spec.config")


def _plain_configs() -> list[dict[str, Any]]:
    """The varied fleet's configs, and Triton's examples with JSON names, proto names and as `import` writes them."""
    configs = [document["spec"]["config"] for document in varied_fleet(100) if document["kind"] == "TritonModel"]
    for path in sorted(TRITON_EXAMPLES.glob("*.pbtxt")):
        try:
            message = text_format.Parse(path.read_text(), ModelConfig())
        except text_format.ParseError:
            continue
        configs += [
            json_format.MessageToDict(message),
            json_format.MessageToDict(message, preserving_proto_field_name=True),
            config_to_dict(message),
        ]
    return configs


def test_plain_configs_are_built_by_the_constructor_as_the_json_parser_builds_them() -> None:
    for config in _plain_configs():
        modelconfig._constructor_arguments(config, ModelConfig.DESCRIPTOR)  # the fast path takes it
        assert _outcome(parse_model_config, config) == _outcome(_by_json_parser, config)


# Values the JSON parser reads otherwise than the constructor would (64-bit integers as text, integral
# floats, "NaN", bools for numbers, floats beyond float32, bytes, lone surrogates, unknown enum numbers).
ODD_VALUES = [
    0,
    -1,
    2**31,
    2**32,
    2**63,
    2**64,
    -(2**63) - 1,
    "12",
    "-12",
    "+12",
    " 12",
    "1.0",
    "1e3",
    "1_0",
    "007",
    "\u0663",
    3.0,
    3.5,
    -0.0,
    1 / 3,
    123456789,
    True,
    False,
    None,
    "",
    "abc",
    [],
    {},
    float("nan"),
    float("inf"),
    -float("inf"),
    "NaN",
    "Infinity",
    "-Infinity",
    "nan",
    1e39,
    -1e39,
    3.4028234663852886e38,
    3.4028235677973366e38,
    1e308,
    b"abc",
    "\ud800",
    [1, None],
    ["1"],
    [True],
    [1.5],
    {1: {}},
    {"a": None},
    99,
    "99",
    "KIND_GPU",
    "kind_gpu",
]


def _odd_configs() -> Iterator[dict[str, Any]]:
    """Every field of the proto set to each odd value, alone and in a list, then under its proto name
    after its JSON name (the parser takes the last of both)."""
    for path in FIELD_PATHS:
        leaf = path[-1]
        values = ODD_VALUES + ([value.name for value in leaf.enum_type.values] if leaf.enum_type else [])
        for value in values:
            yield _nest(path, value)
            yield _nest(path, [value, value])
        if leaf.name != leaf.json_name:
            both = _nest(path, _sample(leaf))
            parent = both
            while leaf.json_name not in parent:
                parent = next(iter(parent.values()))
                parent = parent[0] if isinstance(parent, list) else parent
            parent[leaf.name] = None
            yield both


TWO_SPELLINGS = [
    {"dynamicBatching": {"priorityQueuePolicy": {"1": {"maxQueueSize": 3}, 1: {"timeoutAction": "DELAY"}}}},
    {"dynamicBatching": {"priorityQueuePolicy": {"01": {"maxQueueSize": 3}, "-1": {}}}},
    {"dynamicBatching": {"maxQueueDelayMicroseconds": 1}, "dynamic_batching": None},
    {"versionPolicy": {"latest": {"numVersions": 2}}, "version_policy": {"latest": {}, "specific": {"versions": [1]}}},
    {"maxBatchSize": 4, "max_batch_size": 8},
    {"modelTransactionPolicy": {"decoupled": True}, "model_transaction_policy": {}},
    {"dynamicBatching": {}, "sequenceBatching": {}},
    {"versionPolicy": {"latest": {"numVersions": 2}, "all": None}},
    {"sequenceBatching": {"state": [{"initialState": [{"zeroData": False, "dataFile": "x"}]}]}},
    {"parameters": {1: {"stringValue": "x"}}},
    {"input": ({"name": "x"},)},
    {"foo": 1},
    ["not", "a", "config"],
]


def test_any_other_config_gives_what_the_json_parser_gives() -> None:
    """The same message, or the same problems with the same partial message, or the same exception."""
    configs = [*_odd_configs(), *TWO_SPELLINGS]
    assert len(configs) > 10_000
    for config in configs:
        assert _outcome(parse_model_config, config) == _outcome(_by_json_parser, config), config
