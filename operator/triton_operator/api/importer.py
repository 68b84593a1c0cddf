"""A Triton model repository as custom resources: what `triton-operator import` writes.

Pure: the folders come in as data (read from disk by repository.py). Each model becomes a
TritonModel holding its whole config.pbtxt and, where its files fit in one, a ConfigMap holding
them; a repository also gets the TritonServer that runs its models.

A model with no config.pbtxt, or a python model whose config names no inputs or outputs and whose
model.py defines `auto_complete_config`, gets them from Triton's auto-complete: the operator's servers
run with it disabled, so the CR must hold the whole config. Whether model.py defines it is read from
its syntax tree: auto-complete loads the model, which runs its initialize() too. Triton runs elsewhere
(local/auto_complete.py); what it answers comes back here as a ModelConfig to merge into what the folder
wrote.
"""

from __future__ import annotations

import ast
import base64
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from google.protobuf import text_format

from .config_json import ModelConfig, config_to_dict
from .object_names import MAX_LABEL_LENGTH
from .types import API_VERSION
from .validation import ENSEMBLE_PLATFORM, PYTHON_BACKEND, effective_backend

# The API server refuses a ConfigMap whose keys and values (binaryData decoded) come to more.
CONFIG_MAP_LIMIT_BYTES = 1 << 20
# What a ConfigMap key may hold.
_KEY_CHARACTER = re.compile(r"[^-._a-zA-Z0-9]")
# The python backend's code in each version folder, unless the config's default_model_filename names another.
PYTHON_MODEL_FILE = "model.py"
AUTO_COMPLETE_METHOD = "auto_complete_config"


@dataclass(frozen=True)
class ModelFolder:
    """One model as found in a repository: its config.pbtxt and every other file under its folder."""

    folder: str  # the folder's name: Triton's model name when the config names none
    config: str | None  # config.pbtxt's text; None where the folder has none
    files: Mapping[str, bytes] = field(default_factory=dict)  # path inside the folder -> content
    source: str = ""  # where it was read, for messages
    # Files left unread, more together than a ConfigMap holds (a GiB of weights is never read): path -> size.
    unread: Mapping[str, int] = field(default_factory=dict)
    # The python model's code (1/model.py) where it is among the unread: what decides completion_needed.
    model_code: Mapping[str, bytes] = field(default_factory=dict)

    def sizes(self) -> dict[str, int]:
        """Every file's size, read or not."""
        return {path: len(content) for path, content in self.files.items()} | dict(self.unread)


@dataclass(frozen=True)
class ImportedModel:
    name: str  # the TritonModel's object name
    documents: list[dict[str, Any]]  # its ConfigMap (when it has files that fit) and the TritonModel
    backend: str  # "" for an ensemble, or a model whose backend Triton would guess
    from_repository: bool  # no files come with it: it loads from the server's modelRepository
    note: str = ""  # what to put where, for a model that loads from the repository


def dns_name(model_name: str) -> str:
    """A Kubernetes object name for a Triton model name (add_sub -> add-sub), short enough for the label
    that carries it."""
    name = re.sub(r"[^a-z0-9]+", "-", model_name.lower()).strip("-")[:MAX_LABEL_LENGTH].strip("-")
    return name or "model"


def _config_map_size(sizes: Mapping[str, int], keys: Mapping[str, str]) -> int:
    """The size the API server holds against a ConfigMap's limit: every key and every value."""
    return sum(len(keys[path]) + size for path, size in sizes.items())


def _keys(paths: Iterable[str]) -> dict[str, str]:
    """A ConfigMap key per path: the file's name where no other file has it (model.py), else the path
    with '.' for '/' (1.model.py); characters a key cannot hold become '_'."""
    paths = sorted(paths)
    names = Counter(PurePosixPath(path).name for path in paths)
    keys: dict[str, str] = {}
    for path in paths:
        name = PurePosixPath(path).name
        key = _KEY_CHARACTER.sub("_", name if names[name] == 1 else path.replace("/", "."))[:240]
        candidate, number = key, 2
        while candidate in keys.values():
            candidate, number = f"{key}-{number}", number + 1
        keys[path] = candidate
    return keys


def _text(content: bytes) -> str | None:
    """The content as text for a ConfigMap's `data`, or None for bytes that go into `binaryData`."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\0" in text else text


def _files_config_map(name: str, files: Mapping[str, bytes], keys: Mapping[str, str]) -> dict[str, Any]:
    """The files under their keys: text in `data`, as it reads; bytes base64 in `binaryData`."""
    data, binary = {}, {}
    for path, content in sorted(files.items()):
        text = _text(content)
        if text is None:
            binary[keys[path]] = base64.b64encode(content).decode()
        else:
            data[keys[path]] = text
    config_map: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    if data:
        config_map["data"] = data
    if binary:
        config_map["binaryData"] = binary
    return config_map


def _megabytes(count: int) -> str:
    return f"{count / (1 << 20):.1f} MiB"


def _unique(name: str, taken: Collection[str]) -> str:
    """`name`, or with a number where another model of the import has it (add_sub and add-sub)."""
    candidate, number = name, 2
    while candidate in taken:
        suffix = f"-{number}"
        candidate, number = name[: MAX_LABEL_LENGTH - len(suffix)] + suffix, number + 1
    return candidate


def imported_model(folder: ModelFolder, server: str, taken: Collection[str] = ()) -> ImportedModel:
    """A TritonModel holding the folder's whole config.pbtxt, named by the config or else, as Triton names
    a model, by its folder; its files in a ConfigMap when they fit in one, else it loads from the server's
    modelRepository. Its object name is none of `taken`. Raises text_format.ParseError for a text that is
    not a ModelConfig."""
    config = text_format.Parse(folder.config or "", ModelConfig())
    model_name = config.name or folder.folder
    config.ClearField("name")
    name = _unique(dns_name(model_name), taken)
    spec: dict[str, Any] = {"serverRef": {"name": server}}
    if name != model_name:
        spec["modelName"] = model_name
    documents = []
    sizes = folder.sizes()
    keys = _keys(sizes)
    size = _config_map_size(sizes, keys)
    ensemble = config.platform == ENSEMBLE_PLATFORM
    fits = bool(sizes) and not folder.unread and size <= CONFIG_MAP_LIMIT_BYTES
    if fits:
        config_map = _files_config_map(f"{name}-files", folder.files, keys)
        documents.append(config_map)
        items = [{"key": keys[path], "path": path} for path in sorted(folder.files)]
        spec["files"] = {"configMapRef": {"name": config_map["metadata"]["name"], "items": items}}
    spec["config"] = config_to_dict(config)
    documents.append({"apiVersion": API_VERSION, "kind": "TritonModel", "metadata": {"name": name}, "spec": spec})
    note = ""
    if not fits and not ensemble:
        why = (
            f"its files come to {_megabytes(size)}, more than a ConfigMap holds ({_megabytes(CONFIG_MAP_LIMIT_BYTES)})"
            if sizes
            else "it has no files here"
        )
        note = (
            f"model '{model_name}' loads from the server's modelRepository: {why}. Put its folder "
            f"({folder.source or model_name}, with its version folders) into the repository as '{model_name}/': on the "
            "PersistentVolumeClaim of the TritonServer's spec.modelRepository.pvc, or in the bucket of its "
            f"spec.modelRepository.uri (s3://, gs:// or as://). Locally, `triton-operator local --model-repository "
            f"{PurePosixPath(folder.source).parent if folder.source else 'DIR'}` stands in for that repository"
        )
    return ImportedModel(
        name, documents, "" if ensemble else effective_backend(config), not fits and not ensemble, note
    )


def imported_server(server: str, models: Iterable[ImportedModel]) -> dict[str, Any]:
    """The TritonServer a repository's models run on: the backends they use, and a model repository
    (a PersistentVolumeClaim to make, or to replace with a bucket) when some load from it."""
    models = list(models)
    spec: dict[str, Any] = {"backends": sorted({model.backend for model in models if model.backend})}
    if any(model.from_repository for model in models):
        spec["modelRepository"] = {"pvc": {"claimName": f"{server}-models"}}
    return {"apiVersion": API_VERSION, "kind": "TritonServer", "metadata": {"name": server}, "spec": spec}


# Fields Triton fills on every load, auto-complete or not: the completed config without them loads on a
# server with auto-complete disabled to the very same config (measured, docs/triton-facts.md). Left out
# of the CR unless config.pbtxt wrote them: they are noise there, and the server running the model
# fills them for its own machine (the instance group a laptop gets is KIND_CPU; a GPU pod's is KIND_GPU).
FILLED_ON_EVERY_LOAD = ("version_policy", "instance_group", "default_model_filename", "optimization")


def python_model_files(folder: ModelFolder) -> list[str]:
    """The paths of a python model's code, read or not: `model.py` (or the config's default_model_filename)
    in each version folder; none for another backend or a config that does not parse."""
    try:
        config = text_format.Parse(folder.config or "", ModelConfig())
    except text_format.ParseError:
        return []
    if effective_backend(config) != PYTHON_BACKEND:
        return []
    name = config.default_model_filename or PYTHON_MODEL_FILE
    return [
        path
        for path in folder.sizes()
        if len(parts := PurePosixPath(path).parts) == 2 and parts[0].isdigit() and parts[1] == name
    ]


def defines_auto_complete_config(code: bytes) -> bool:
    """Whether the code defines `auto_complete_config` (a method, or a name bound to one), read from its syntax
    tree: importing it would run it. Code that does not parse defines none; Triton says why when it loads."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == AUTO_COMPLETE_METHOD:
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == AUTO_COMPLETE_METHOD for target in node.targets
        ):
            return True
    return False


def completion_needed(folder: ModelFolder) -> str:
    """Why Triton's auto-complete must complete the folder's config ("" where it need not): no config.pbtxt,
    or a python model whose config names no inputs or no outputs and whose model.py defines
    auto_complete_config (the operator's servers would not ask it for them). Any other model imports as
    written: auto-complete would load it, running its initialize() for nothing. A config file alone, without
    the model's files, cannot be completed; a text that is not a ModelConfig needs none: imported_model says
    what is wrong."""
    if folder.config is None:
        return "no config.pbtxt"
    if not folder.sizes():
        return ""
    try:
        config = text_format.Parse(folder.config, ModelConfig())
    except text_format.ParseError:
        return ""
    if effective_backend(config) != PYTHON_BACKEND or (config.input and config.output):
        return ""
    code = {**folder.files, **folder.model_code}
    if not any(defines_auto_complete_config(code.get(path, b"")) for path in python_model_files(folder)):
        return ""
    return f"a python model whose config.pbtxt has no {'inputs' if not config.input else 'outputs'}"


def completed_config(written: str | None, completed: ModelConfig) -> ModelConfig:
    """Triton's completed config, less what Triton fills on every load where config.pbtxt did not write it;
    the name stays the one written (Triton's is the folder's)."""
    original = text_format.Parse(written or "", ModelConfig())
    written_wins = ("name", *FILLED_ON_EVERY_LOAD)
    kept = ModelConfig()
    kept.CopyFrom(original)
    for descriptor, _ in kept.ListFields():
        if descriptor.name not in written_wins:
            kept.ClearField(descriptor.name)
    config = ModelConfig()
    config.CopyFrom(completed)
    for name in written_wins:
        config.ClearField(name)
    config.MergeFrom(kept)
    batching = config.dynamic_batching
    # Triton fills a dynamic batcher's preferred sizes with the max batch size where none are given.
    if not original.dynamic_batching.preferred_batch_size and list(batching.preferred_batch_size) == [
        config.max_batch_size
    ]:
        batching.ClearField("preferred_batch_size")
    return config


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def completion_summary(config: ModelConfig) -> str:
    """What auto-complete gave a model, in the CR's words: "2 inputs, 2 outputs, maxBatchSize 4, dynamicBatching"."""
    parts = [
        _count(len(config.input), "input"),
        _count(len(config.output), "output"),
        f"maxBatchSize {config.max_batch_size}",
    ]
    if config.HasField("dynamic_batching"):
        parts.append("dynamicBatching")
    if config.model_transaction_policy.decoupled:
        parts.append("decoupled")
    return ", ".join(parts)
