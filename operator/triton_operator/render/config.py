"""A model's revision from its TritonModel: the ModelConfig message Triton runs, its revision, and the
one value (DesiredModel) holding each form of it, made once."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping

from ..api.resources import TritonModel
from ..protocol.desired import DesiredModel, config_pbtxt
from ..protocol.names import REVISION_PARAMETER
from ..protocol.triton_proto import model_config_pb2

# Triton loads a model only from a directory with a version folder; an ensemble has no files of
# its own, so an empty version folder goes with its config (measured: without it, "model not
# found in any model repository").
ENSEMBLE_VERSION_FOLDER = {"1/.keep": b""}


def files_digest(files: Mapping[str, bytes]) -> str:
    """A hash of the model files, independent of the order they were listed in."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return digest.hexdigest()


_REVISION_LENGTH = 16
_PLACEHOLDER = "0" * _REVISION_LENGTH  # hex digits, as a revision: printed as they are, unescaped


@functools.cache
def _placeholder_entry() -> str:
    """How config_pbtxt prints the revision parameter (a top-level map entry) holding the placeholder."""
    message = model_config_pb2.ModelConfig()
    message.parameters[REVISION_PARAMETER].string_value = _PLACEHOLDER
    return config_pbtxt(message)


def built_model_config(
    model: TritonModel, files: Mapping[str, bytes] | None = None
) -> tuple[model_config_pb2.ModelConfig, str]:
    """The message Triton runs (spec.config with the model's name and its revision) and its config.pbtxt,
    printed once (protobuf's text format is Python).

    The revision is a digest of the config printed without it. Printed with a placeholder revision
    instead, the config's text is that text with the placeholder's entry added where protobuf puts it
    (the parameters map, keys sorted): taking that entry out gives the text to digest, and the
    revision in the placeholder's place gives config.pbtxt. A config that sets the revision parameter
    itself is printed twice, as the entry to take out is then not the placeholder's."""
    config = model.spec.parsed_config()
    config.name = model.model_name
    printed, start, entry = None, -1, _placeholder_entry()
    if REVISION_PARAMETER not in config.parameters:
        config.parameters[REVISION_PARAMETER].string_value = _PLACEHOLDER
        printed = config_pbtxt(config)
        start = printed.find(entry)
        # The entry starts a line, once: the same lines nested deeper would be indented.
        if start < 0 or (start > 0 and printed[start - 1] != "\n") or printed.count(entry) != 1:
            printed = None
        del config.parameters[REVISION_PARAMETER]
    end = start + len(entry)
    without = printed[:start] + printed[end:] if printed is not None else config_pbtxt(config)
    revision = hashlib.sha256(without.encode() + files_digest(files or {}).encode()).hexdigest()[:_REVISION_LENGTH]
    config.parameters[REVISION_PARAMETER].string_value = revision
    if printed is None:
        return config, config_pbtxt(config)
    return config, printed[:start] + entry.replace(_PLACEHOLDER, revision) + printed[end:]


def config_revision(config: model_config_pb2.ModelConfig) -> str:
    """The revision of a config built by built_model_config (shown in status and kubectl)."""
    revision: str = config.parameters[REVISION_PARAMETER].string_value
    return revision


def desired_model(
    config: model_config_pb2.ModelConfig,
    files: Mapping[str, bytes] | None = None,
    load_timeout_seconds: float | None = None,
    printed: str | None = None,
) -> DesiredModel:
    """The value of a config built by built_model_config, with its config.pbtxt when printed already.
    The load timeout bounds how the load is done, not what runs, so it is no part of the revision."""
    composing = frozenset(step.model_name for step in config.ensemble_scheduling.step)
    return DesiredModel(
        name=config.name,
        revision=config_revision(config),
        serialized_config=config.SerializeToString(deterministic=True),
        files=files or (ENSEMBLE_VERSION_FOLDER if composing else {}),
        composing=composing,
        load_timeout_seconds=load_timeout_seconds,
        printed_pbtxt=printed,
    )
