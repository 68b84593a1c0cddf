"""Every field path of Triton's ModelConfig with a sample value for it: what the config tests walk."""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor as pb_descriptor

from triton_operator.api.config_json import ModelConfig

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


def sample(field: FieldDescriptor) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name["value"]
        return {"1": sample(value_field) if value_field.message_type else _sample_scalar(value_field)}
    value = {} if field.message_type is not None else _sample_scalar(field)
    return [value] if field.is_repeated else value


def every_field_path(
    descriptor: pb_descriptor.Descriptor, prefix: tuple[FieldDescriptor, ...] = ()
) -> list[tuple[FieldDescriptor, ...]]:
    paths = []
    for field in descriptor.fields:
        paths.append((*prefix, field))
        message = field.message_type
        if message is not None and message.GetOptions().map_entry:
            message = message.fields_by_name["value"].message_type
        if message is not None:
            paths += every_field_path(message, (*prefix, field))
    return paths


def nest(path: tuple[FieldDescriptor, ...], value: Any) -> dict[str, Any]:
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


FIELD_PATHS = every_field_path(ModelConfig.DESCRIPTOR)
