"""Bridge between `TritonModel.spec.config` and Triton's own `ModelConfig` protobuf.

The config is written in protobuf's JSON mapping (camelCase, enum names). Triton's
`model_config.proto` (as compiled into tritonclient) is the only definition of what is
accepted: parsing, the CRD schema (config_schema.py) and the printed form all come from its descriptor.
"""

from __future__ import annotations

import difflib
import functools
from typing import Any

from google.protobuf import descriptor as pb_descriptor
from google.protobuf import json_format

from ..protocol.triton_proto import is_map, model_config_pb2
from ..speed.config_constructor import constructor_arguments

ModelConfig = model_config_pb2.ModelConfig
FieldDescriptor = pb_descriptor.FieldDescriptor

_INT64_MAX = 2**63 - 1
_WIDE_INTEGERS = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64}


class ModelConfigError(ValueError):
    """A config that is not a Triton ModelConfig: every problem found, each with the field it names.

    `partial` is the config without the offending fields (None if nothing parsed), so Triton's
    rules can still be checked on the rest in the same run.
    """

    def __init__(self, problems: list[tuple[str, str]], partial: model_config_pb2.ModelConfig | None = None):
        super().__init__("; ".join(f"{path}: {message}" for path, message in problems))
        self.problems = problems
        self.path, self.message = problems[0]
        self.partial = partial


_PARSE_FAILURES = (json_format.ParseError, TypeError, ValueError, AttributeError, OverflowError)


def parse_model_config(data: dict[str, Any], path: str = "spec.config") -> model_config_pb2.ModelConfig:
    """Parse the JSON mapping into Triton's message; unknown fields and bad values are errors naming the path.

    A config of plain values (what people and the API server write) is built by the message's C
    constructor (speed/config_constructor.py); anything else, wrong or not, goes to the field check and
    protobuf's JSON parser, so they decide and word the errors."""
    try:
        return ModelConfig(**constructor_arguments(data, ModelConfig.DESCRIPTOR))
    except Exception:  # whatever failed is judged again by the parser, and reported as before
        pass
    return _parse_json_mapping(data, path)


def _parse_json_mapping(data: dict[str, Any], path: str) -> model_config_pb2.ModelConfig:
    problems: list[tuple[str, str]] = []
    known = _known_fields(data, ModelConfig.DESCRIPTOR, path, problems)
    try:
        config = json_format.ParseDict(known, ModelConfig())
    except _PARSE_FAILURES:
        config = _parse_each_field(known, path, problems)
    if problems:
        raise ModelConfigError(problems, config)
    return config


class ParsedConfig(dict[str, Any]):
    """A config as written (the JSON mapping), with the message it parses into: parsed once, when the
    API model is validated, and built on by rendering rather than parsed again. The message is kept
    serialized: a live one holds a protobuf arena many times the size of the config's bytes, and the
    operator keeps every model's parse (bench/RESULTS.md, "Measurements behind the design")."""

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data)
        self.serialized = parse_model_config(data).SerializeToString(deterministic=True)

    def message(self) -> model_config_pb2.ModelConfig:
        """A new message of the config, for the caller to add to."""
        return ModelConfig.FromString(self.serialized)


def _parse_each_field(
    data: dict[str, Any], path: str, problems: list[tuple[str, str]]
) -> model_config_pb2.ModelConfig | None:
    """The top-level fields one by one, so every bad value is reported and the good ones kept."""
    parsed = {}
    for key, value in data.items():
        try:
            json_format.ParseDict({key: value}, ModelConfig())
        except _PARSE_FAILURES as error:
            problems.append((f"{path}.{key}", f"{error}. Fix the value to match Triton's model_config.proto"))
        else:
            parsed[key] = value
    try:
        return json_format.ParseDict(parsed, ModelConfig())
    except _PARSE_FAILURES:
        return None


def _known_fields(data: Any, descriptor: pb_descriptor.Descriptor, path: str, problems: list[tuple[str, str]]) -> Any:
    """The data without the fields the descriptor lacks; each one left out (and each misshape) is a problem
    naming its full path and a close match."""
    if not isinstance(data, dict):
        problems.append((path, f"expected an object ({descriptor.name}), got {type(data).__name__}"))
        return {}
    known = _fields_by_name(descriptor)
    for oneof in descriptor.oneofs:
        chosen = [f.json_name for f in oneof.fields if f.json_name in data or f.name in data]
        if len(chosen) > 1:
            problems.append((path, f"set at most one of: {', '.join(chosen)}"))
    kept: dict[str, Any] = {}
    written_as: dict[str, str] = {}  # field name -> the key it was written under
    for key, value in data.items():
        field = known.get(key)
        if field is None:
            hint = difflib.get_close_matches(str(key), [f.json_name for f in descriptor.fields], n=1)
            advice = f"did you mean '{hint[0]}'?" if hint else f"{descriptor.name} has no such field"
            problems.append((f"{path}.{key}", f"unknown field; {advice}"))
            continue
        if (first := written_as.setdefault(field.name, key)) != key:
            problems.append((f"{path}.{key}", f"the same field as '{first}': write it once, as '{field.json_name}'"))
            continue
        if field.enum_type is not None and (problem := _enum_problem(field.enum_type, value)):
            problems.append((f"{path}.{field.json_name}", problem))
            continue
        kept[key] = (
            value
            if field.message_type is None
            else _known_message_field(field, value, f"{path}.{field.json_name}", problems)
        )
    return kept


@functools.cache
def _fields_by_name(descriptor: pb_descriptor.Descriptor) -> dict[str, pb_descriptor.FieldDescriptor]:
    """A message's fields by JSON and proto name, built once per message type (every model walks them)."""
    return {f.json_name: f for f in descriptor.fields} | {f.name: f for f in descriptor.fields}


def _enum_problem(enum: pb_descriptor.EnumDescriptor, value: Any) -> str:
    """protobuf's parser takes any number for an enum, which then cannot be printed: names and known numbers only."""
    names = [item.name for item in enum.values]
    numbers = {item.number for item in enum.values}
    for item in value if isinstance(value, list) else [value]:
        known = item in names if isinstance(item, str) else type(item) is int and item in numbers
        if not known:
            return f"{item!r} is not a {enum.name}: use one of {', '.join(names)}"
    return ""


def _known_message_field(
    field: pb_descriptor.FieldDescriptor, value: Any, path: str, problems: list[tuple[str, str]]
) -> Any:
    if is_map(field):
        if not isinstance(value, dict):
            problems.append((path, "expected a map (an object of key: value)"))
            return {}
        value_field = field.message_type.fields_by_name["value"]
        if value_field.message_type is None:
            return value
        return {
            key: _known_fields(item, value_field.message_type, f"{path}.{key}", problems) for key, item in value.items()
        }
    if field.is_repeated:
        if not isinstance(value, list):
            problems.append((path, "expected a list"))
            return []
        return [
            _known_fields(item, field.message_type, f"{path}[{index}]", problems) for index, item in enumerate(value)
        ]
    return _known_fields(value, field.message_type, path, problems)


def config_to_dict(config: model_config_pb2.ModelConfig) -> dict[str, Any]:
    """The JSON mapping as a person writes it: 64-bit integers as numbers where the API server can hold
    them, map keys sorted (protobuf iterates a map in no fixed order, so `import` would differ run to run)."""
    return _integers_as_numbers(json_format.MessageToDict(config), ModelConfig.DESCRIPTOR)


def _integers_as_numbers(data: dict[str, Any], descriptor: pb_descriptor.Descriptor) -> dict[str, Any]:
    fields = {f.json_name: f for f in descriptor.fields}
    result: dict[str, Any] = {}
    for key, value in data.items():
        field = fields[key]
        if is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            result[key] = {k: _convert(v, value_field) for k, v in sorted(value.items())}
        elif field.is_repeated:
            result[key] = [_convert(v, field) for v in value]
        else:
            result[key] = _convert(value, field)
    return result


def _convert(value: Any, field: pb_descriptor.FieldDescriptor) -> Any:
    if field.message_type is not None:
        return _integers_as_numbers(value, field.message_type)
    if field.type in _WIDE_INTEGERS:
        number = int(value)
        return number if number <= _INT64_MAX else str(number)
    return value
