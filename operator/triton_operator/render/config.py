"""config.pbtxt, the load-request JSON and the config hash, all from one ModelConfig message."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from ..api.modelconfig import parse_model_config
from ..api.resources import TritonModel

# Triton does not reload a model whose config is unchanged even when its files changed
# (measured, DESIGN.md 3a), so the files' hash travels inside the config.
FILES_HASH_PARAMETER = "triton-operator.io/files-sha256"


def files_digest(files: Mapping[str, bytes]) -> str:
    """A hash of the model files, independent of the order they were listed in."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return digest.hexdigest()


def build_model_config(model: TritonModel, files: Mapping[str, bytes] | None = None) -> model_config_pb2.ModelConfig:
    """The message Triton runs: spec.config with the model's name and, with files, their hash."""
    config = parse_model_config(model.spec.config)
    config.name = model.model_name
    if files:
        config.parameters[FILES_HASH_PARAMETER].string_value = files_digest(files)
    return config


def config_pbtxt(config: model_config_pb2.ModelConfig) -> str:
    """Triton's text format; protobuf prints fields in declaration order and map keys sorted."""
    return text_format.MessageToString(config)


def load_request_json(config: model_config_pb2.ModelConfig) -> str:
    """The `config` parameter of Triton's load request, with proto field names as Triton documents."""
    return json_format.MessageToJson(config, preserving_proto_field_name=True, sort_keys=True, indent=None)


def config_hash(config: model_config_pb2.ModelConfig) -> str:
    """Short hash of what runs (the files' hash is inside the config), shown in status and kubectl."""
    return hashlib.sha256(config_pbtxt(config).encode()).hexdigest()[:12]
