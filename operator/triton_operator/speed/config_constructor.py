"""A TritonModel's config (protobuf's JSON mapping) built by the ModelConfig message's C constructor, for
what protobuf's JSON parser (pure Python) would read into the same message; anything else raises NotPlain
and goes to the parser (api/config_json.py), which decides and words the errors. Equal by
tests/speed/test_config_constructor.py; its figure: bench/RESULTS.md, "Speed-only code".
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

from google.protobuf import descriptor as pb_descriptor

from ..protocol.triton_proto import is_map

FieldDescriptor = pb_descriptor.FieldDescriptor


class NotPlain(ValueError):
    """A value protobuf's JSON parser may read otherwise than the C constructor: left to the parser."""


def constructor_arguments(data: Any, descriptor: pb_descriptor.Descriptor) -> dict[str, Any]:
    """The keyword arguments of the message's constructor (proto names) for a JSON mapping that
    protobuf's JSON parser would turn into the same message, with nothing _known_fields would report;
    raises on anything else."""
    if not isinstance(data, dict):
        raise NotPlain(data)
    fields = _plain_fields(descriptor)
    arguments: dict[str, Any] = {}
    oneofs = []
    for key, value in data.items():
        name, convert, oneof = fields[key]
        if name in arguments:  # the JSON and the proto name both given: the parser merges or refuses
            raise NotPlain(key)
        if oneof is not None:
            if oneof in oneofs:
                raise NotPlain(key)
            oneofs.append(oneof)
        arguments[name] = convert(value)
    return arguments


@functools.cache
def _plain_fields(descriptor: pb_descriptor.Descriptor) -> dict[str, tuple[str, Any, str | None]]:
    """A message's fields by JSON and proto name: proto name, converter of a plain value, oneof."""
    fields = {}
    for field in descriptor.fields:
        oneof = field.containing_oneof.name if field.containing_oneof is not None else None
        fields[field.json_name] = fields[field.name] = (field.name, _plain_converter(field), oneof)
    return fields


def _plain_converter(field: pb_descriptor.FieldDescriptor) -> Any:
    if is_map(field):
        key_field, value_field = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        return functools.partial(_plain_map, _plain_value_converter(key_field), _plain_value_converter(value_field))
    if field.is_repeated:
        return functools.partial(_plain_list, _plain_value_converter(field))
    return _plain_value_converter(field)


def _plain_value_converter(field: pb_descriptor.FieldDescriptor) -> Any:
    if field.message_type is not None:
        return functools.partial(constructor_arguments, descriptor=field.message_type)
    if field.enum_type is not None:
        names = frozenset(value.name for value in field.enum_type.values)
        numbers = frozenset(value.number for value in field.enum_type.values)
        return functools.partial(_plain_enum, names, numbers)
    return _PLAIN_SCALARS[field.type]


def _plain_map(convert_key: Any, convert_value: Any, value: Any) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise NotPlain(value)
    converted = {convert_key(key): convert_value(item) for key, item in value.items()}
    if len(converted) != len(value):  # two spellings of one key ("1" and 1): the parser merges them
        raise NotPlain(value)
    return converted


def _plain_list(convert_item: Any, value: Any) -> list[Any]:
    if type(value) is not list:
        raise NotPlain(value)
    return [convert_item(item) for item in value]


def _plain_enum(names: frozenset[str], numbers: frozenset[int], value: Any) -> Any:
    """A value's name or known number (the parser also reads a number written as text)."""
    if value in names if type(value) is str else type(value) is int and value in numbers:
        return value
    raise NotPlain(value)


_DECIMAL = re.compile(r"-?[0-9]+")
_FLOAT32_MAX = 3.4028234663852886e38  # the parser refuses a float beyond it; the constructor would store inf


def _plain_integer(value: Any) -> int:
    """An int, or the decimal text of one (how 64-bit integers may come); no bool, no float."""
    if type(value) is int:
        return value
    if type(value) is str and _DECIMAL.fullmatch(value):
        return int(value)
    raise NotPlain(value)


def _plain_double(value: Any) -> float | int:
    if type(value) is int or (type(value) is float and math.isfinite(value)):
        return value
    raise NotPlain(value)


def _plain_float(value: Any) -> float | int:
    if (type(value) is int or type(value) is float) and -_FLOAT32_MAX <= value <= _FLOAT32_MAX:
        return value
    raise NotPlain(value)


def _plain_bool(value: Any) -> bool:
    if type(value) is bool:
        return value
    raise NotPlain(value)


def _plain_string(value: Any) -> str:
    """Text (one with a lone surrogate fails in the constructor, as in the parser)."""
    if type(value) is str:
        return value
    raise NotPlain(value)


_PLAIN_SCALARS = {
    FieldDescriptor.TYPE_INT32: _plain_integer,
    FieldDescriptor.TYPE_INT64: _plain_integer,
    FieldDescriptor.TYPE_UINT32: _plain_integer,
    FieldDescriptor.TYPE_UINT64: _plain_integer,
    FieldDescriptor.TYPE_DOUBLE: _plain_double,
    FieldDescriptor.TYPE_FLOAT: _plain_float,
    FieldDescriptor.TYPE_BOOL: _plain_bool,
    FieldDescriptor.TYPE_STRING: _plain_string,
}
