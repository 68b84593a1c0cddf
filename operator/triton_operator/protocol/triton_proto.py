"""Triton's ModelConfig messages (tritonclient's generated `model_config_pb2`) without the rest of
`tritonclient.grpc`, whose package imports grpc and numpy, a large share of the start-up of commands
that only read and render configs (bench/RESULTS.md, "Measurements behind the design"). The module is
registered under its own name, so a later `from tritonclient.grpc import model_config_pb2`
(tritonclient's own included) gets this same module: one descriptor, one set of message classes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

_MODULE = "tritonclient.grpc.model_config_pb2"


def _load() -> ModuleType:
    if _MODULE in sys.modules:
        return sys.modules[_MODULE]
    package = importlib.util.find_spec("tritonclient")
    assert package is not None and package.submodule_search_locations, "tritonclient is a dependency"
    path = Path(package.submodule_search_locations[0]) / "grpc" / "model_config_pb2.py"
    spec = importlib.util.spec_from_file_location(_MODULE, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE] = module
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    # The redundant alias re-exports the name for mypy's strict no-implicit-reexport.
    from tritonclient.grpc import model_config_pb2 as model_config_pb2
else:
    model_config_pb2 = _load()


def wire_datatype(data_type: int) -> str:
    """A config data type's name in inference requests (KServe v2): FP32 for TYPE_FP32, BYTES for TYPE_STRING."""
    name = model_config_pb2.DataType.Name(data_type).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def is_map(field: Any) -> bool:
    """A map field: protobuf holds it as a repeated message of key and value."""
    return bool(field.is_repeated and field.message_type is not None and field.message_type.GetOptions().map_entry)
