"""speed/config_constructor.py against protobuf's JSON parser: a plain config is built by the constructor into the
same message, and any other config (odd values, two spellings of one field) gives what the parser gives."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from google.protobuf import json_format, text_format

from tests.support.config_fields import FIELD_PATHS, nest, sample
from tests.support.fleet import TRITON_EXAMPLES, varied_fleet
from triton_operator.api import config_json
from triton_operator.api.config_json import ModelConfig, ModelConfigError, config_to_dict, parse_model_config
from triton_operator.speed.config_constructor import constructor_arguments


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
    return config_json._parse_json_mapping(config, "spec.config")


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
        constructor_arguments(config, ModelConfig.DESCRIPTOR)  # the fast path takes it
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
            yield nest(path, value)
            yield nest(path, [value, value])
        if leaf.name != leaf.json_name:
            both = nest(path, sample(leaf))
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
