"""The CRD schema of `TritonModel.spec.config`, from the descriptor of Triton's `ModelConfig`: every
field, enums by name, oneofs as CEL rules, and the config checks that CEL can express.

Apart from the parsing (modelconfig.py) because it is read once, to generate the CRD, while the
parsing runs for every model; both come from the same descriptor.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor as pb_descriptor

from ..protocol.triton_proto import is_map
from .config_json import FieldDescriptor, ModelConfig
from .config_strings import FIELD_PATTERNS

_INTEGER_TYPES = {
    FieldDescriptor.TYPE_INT32: "int32",
    FieldDescriptor.TYPE_UINT32: "int64",
    FieldDescriptor.TYPE_INT64: "int64",
}
# uint64 goes beyond the API server's int64: such values are strings, as in protobuf's JSON mapping.
_UINT64_SCHEMA = {"x-kubernetes-int-or-string": True, "pattern": "^[0-9]+$"}
_NUMBER_TYPES = {FieldDescriptor.TYPE_FLOAT: "float", FieldDescriptor.TYPE_DOUBLE: "double"}

# The checks of validation.py and batcher_checks.py that CEL can express, so the API server refuses
# them too. Each has the same meaning as its Python twin; tests run both on the same failing examples.
_MAX_BATCH = "(has(self.maxBatchSize) ? self.maxBatchSize : 0)"
CEL_RULES: dict[str, list[tuple[str, str]]] = {
    "inference.ModelConfig": [
        ("!has(self.maxBatchSize) || self.maxBatchSize >= 0", "maxBatchSize must be >= 0 (0 disables batching)"),
        (
            "!has(self.dynamicBatching) || !has(self.dynamicBatching.preferredBatchSize) || "
            f"self.dynamicBatching.preferredBatchSize.all(b, b <= {_MAX_BATCH})",
            "dynamicBatching.preferredBatchSize entries must not exceed maxBatchSize",
        ),
        (
            "!has(self.input) || !self.input.exists(i, has(i.allowRaggedBatch) && i.allowRaggedBatch) || "
            f"{_MAX_BATCH} > 0",
            "input[].allowRaggedBatch needs batching: set maxBatchSize > 0",
        ),
        (
            "has(self.ensembleScheduling) == (has(self.platform) && self.platform == 'ensemble')",
            "ensembleScheduling goes with platform 'ensemble', and the ensemble platform needs ensembleScheduling",
        ),
    ],
    "inference.ModelInput": [
        ("has(self.name) && self.name != ''", "every input needs a name"),
        ("has(self.dataType) && self.dataType != 'TYPE_INVALID'", "every input needs a dataType, e.g. TYPE_FP32"),
        ("has(self.dims) && size(self.dims) > 0", "every input needs dims, the shape without the batch dimension"),
        ("!has(self.dims) || self.dims.all(d, d >= 1 || d == -1)", "dims must be >= 1, or -1 for a variable size"),
    ],
    "inference.ModelOutput": [
        ("has(self.name) && self.name != ''", "every output needs a name"),
        ("has(self.dataType) && self.dataType != 'TYPE_INVALID'", "every output needs a dataType, e.g. TYPE_FP32"),
        ("has(self.dims) && size(self.dims) > 0", "every output needs dims, the shape without the batch dimension"),
        ("!has(self.dims) || self.dims.all(d, d >= 1 || d == -1)", "dims must be >= 1, or -1 for a variable size"),
    ],
    "inference.ModelDynamicBatching": [
        (
            "!has(self.preferredBatchSize) || self.preferredBatchSize.all(b, b >= 1)",
            "preferredBatchSize entries must be >= 1",
        ),
    ],
    "inference.ModelInstanceGroup": [
        ("!has(self.gpus) || self.gpus.all(g, g >= 0)", "gpus holds GPU ids, which are >= 0"),
        (
            "!has(self.kind) || !(self.kind == 'KIND_CPU' || self.kind == 'KIND_MODEL') || "
            "!has(self.gpus) || size(self.gpus) == 0",
            "gpus may only be set with kind KIND_GPU (or KIND_AUTO)",
        ),
        ("!has(self.count) || self.count >= 0", "count must be >= 1 (0 means Triton's default)"),
    ],
}
# Lists are bounded so the API server can estimate the cost of the CEL rules that walk them
# (a rule inside input[] walking dims costs inputs x dims).
_MAX_MESSAGES = 1024
_MAX_SCALARS = 256


def openapi_schema(descriptor: pb_descriptor.Descriptor = ModelConfig.DESCRIPTOR) -> dict[str, Any]:
    """A structural OpenAPI v3 schema for a message: every field, enums by name, oneofs and CEL_RULES."""
    properties = {field.json_name: _field_schema(field) for field in descriptor.fields}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    rules = [_oneof_rule(oneof) for oneof in descriptor.oneofs if len(oneof.fields) > 1]
    rules += [{"rule": rule, "message": message} for rule, message in CEL_RULES.get(descriptor.full_name, [])]
    if rules:
        schema["x-kubernetes-validations"] = rules
    return schema


def _oneof_rule(oneof: pb_descriptor.OneofDescriptor) -> dict[str, str]:
    names = [field.json_name for field in oneof.fields]
    counted = " + ".join(f"(has(self.{name}) ? 1 : 0)" for name in names)
    return {"rule": f"{counted} <= 1", "message": f"set at most one of: {', '.join(names)}"}


def _field_schema(field: pb_descriptor.FieldDescriptor) -> dict[str, Any]:
    if is_map(field):
        value_field = field.message_type.fields_by_name["value"]
        return {"type": "object", "additionalProperties": _scalar_or_message_schema(value_field)}
    item = _scalar_or_message_schema(field)
    if field.is_repeated:
        return {"type": "array", "items": item, "maxItems": _MAX_MESSAGES if field.message_type else _MAX_SCALARS}
    return item


def _scalar_or_message_schema(field: pb_descriptor.FieldDescriptor) -> dict[str, Any]:
    if field.message_type is not None:
        return openapi_schema(field.message_type)
    if field.enum_type is not None:
        return {"type": "string", "enum": [value.name for value in field.enum_type.values]}
    if field.type == FieldDescriptor.TYPE_UINT64:
        return dict(_UINT64_SCHEMA)
    if field.type in _INTEGER_TYPES:
        return {"type": "integer", "format": _INTEGER_TYPES[field.type]}
    if field.type in _NUMBER_TYPES:
        return {"type": "number", "format": _NUMBER_TYPES[field.type]}
    if field.type == FieldDescriptor.TYPE_BOOL:
        return {"type": "boolean"}
    if field.type == FieldDescriptor.TYPE_STRING:
        pattern = FIELD_PATTERNS.get(field.full_name)
        return {"type": "string", "pattern": pattern} if pattern else {"type": "string"}
    if field.type == FieldDescriptor.TYPE_BYTES:
        return {"type": "string", "format": "byte"}
    raise TypeError(f"unsupported protobuf field type {field.type} for {field.full_name}")
