"""A revision of a model kept as it ran: the ConfigMap a canary rollout rolls back from.

The spec names only the newest revision, and a ConfigMap edit can itself be the change, so the
previous revision's load config and files are kept in a ConfigMap of their own, owned by the model
(garbage-collected with it). Keys of a ConfigMap cannot hold '/', so files are numbered and a
`paths.json` says where each goes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format

from ..api.resources import TritonModel
from ..protocol.desired import DesiredModel
from ..protocol.names import REVISION_PARAMETER
from ..protocol.triton_proto import model_config_pb2
from . import manifests

CONFIG_KEY = "config.json"
PATHS_KEY = "paths.json"
COMPOSING_KEY = "composing.json"


def revision_config_map_name(model_name: str, revision: str) -> str:
    return f"{model_name}-revision-{revision}"


def revision_config_map(model: TritonModel, desired: DesiredModel) -> dict[str, Any]:
    """The ConfigMap holding `desired` exactly as the sync loads it, labelled with its revision."""
    keys = {f"file-{index}": path for index, path in enumerate(sorted(desired.files))}
    labels = {**manifests.model_labels(model), REVISION_PARAMETER: desired.revision}
    meta = manifests.model_child_meta(revision_config_map_name(model.name, desired.revision), model, labels)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {
            CONFIG_KEY: desired.config_json,
            PATHS_KEY: json.dumps(keys, sort_keys=True),
            COMPOSING_KEY: json.dumps(sorted(desired.composing)),
        },
        "binaryData": {key: base64.b64encode(desired.files[path]).decode() for key, path in keys.items()},
    }


def desired_from_config_map(name: str, revision: str, config_map: Mapping[str, Any]) -> DesiredModel | None:
    """The revision kept in a ConfigMap, or None when it does not hold one whole (a user edited it)."""
    data = config_map.get("data") or {}
    binary = config_map.get("binaryData") or {}
    try:
        paths = json.loads(data[PATHS_KEY])
        files = {path: base64.b64decode(binary[key]) for key, path in paths.items()}
        composing = frozenset(json.loads(data[COMPOSING_KEY]))
        config = json_format.Parse(data[CONFIG_KEY], model_config_pb2.ModelConfig())
    except (KeyError, ValueError, TypeError, json_format.ParseError):
        return None
    serialized = config.SerializeToString(deterministic=True)  # the JSON it loads is the one kept
    return DesiredModel(name, revision, serialized, files, composing, printed_json=data[CONFIG_KEY])
