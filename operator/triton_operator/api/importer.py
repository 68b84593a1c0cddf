"""An existing config.pbtxt as a TritonModel document: what `triton-operator import` prints."""

from __future__ import annotations

from typing import Any

from google.protobuf import text_format

from .modelconfig import ModelConfig, config_to_dict
from .types import API_VERSION


def dns_name(model_name: str) -> str:
    """A Kubernetes object name for a Triton model name (add_sub -> add-sub)."""
    return "".join(c if c.isalnum() else "-" for c in model_name.lower()).strip("-")[:253] or "model"


def imported_model(pbtxt: str, folder_name: str, server: str) -> dict[str, Any]:
    """A TritonModel holding a whole config.pbtxt, named by the config or else, as Triton names a model,
    by its folder. Raises text_format.ParseError for a text that is not a ModelConfig."""
    config = text_format.Parse(pbtxt, ModelConfig())
    model_name = config.name or folder_name
    config.ClearField("name")
    name = dns_name(model_name)
    spec: dict[str, Any] = {"serverRef": {"name": server}}
    if name != model_name:
        spec["modelName"] = model_name
    spec["config"] = config_to_dict(config)
    return {"apiVersion": API_VERSION, "kind": "TritonModel", "metadata": {"name": name}, "spec": spec}
