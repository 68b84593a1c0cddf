"""`TritonModel.spec`: one model, its Triton config as structured YAML, and where it is served."""

import re
from typing import Annotated, Any, Self, cast

from pydantic import Field, StringConstraints, WithJsonSchema, field_validator, model_validator

from . import config_json as modelconfig
from . import config_schema
from .rollout_spec import ModelRolloutSpec
from .server import InlineServerSpec
from .types import (
    RELATIVE_PATH_PATTERN,
    ApiModel,
    ByteQuantity,
    LabelSelector,
    LocalObjectReference,
    relative_path_problem,
    with_cel_rules,
    without_control_characters,
)

# Triton model names are directory names in the repository: no path separators, not "." or "..".
MODEL_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}$"
# Model files sit under the model directory, e.g. "1/model.py"; config.pbtxt comes from spec.config.
CONFIG_FILE = "config.pbtxt"
# Linux's NAME_MAX and PATH_MAX: Triton writes a model's files where it loads them, and fails past them.
NAME_MAX_BYTES = 255
PATH_MAX_BYTES = 4096

# Triton loads the versions of a model from its numbered folders: without one it has "no version available".
VERSION_FOLDER = r"^[0-9]+/"
NO_VERSION_FOLDER = (
    "no path is inside a version folder, so Triton finds no version to load: put the model's files under one, "
    "e.g. path: 1/model.py (files beside config.pbtxt, such as labels.txt, may stay where they are)"
)

ModelName = Annotated[str, StringConstraints(pattern=MODEL_NAME_PATTERN)]

TritonModelConfig = Annotated[
    dict[str, Any],
    WithJsonSchema(config_schema.openapi_schema()),
]


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 60 else f"{text[:20]!r}..."


def file_path_problem(path: str) -> str:
    """Why `path` cannot be a model file's path inside its directory ("" where it can): one spelling for each
    file, nothing over the rendered config, nothing past the file system's limits."""
    if relative_path_problem(path):
        return f"{_shown(path)} must be a relative path inside the model directory, e.g. 1/model.py"
    if path == CONFIG_FILE:
        return f"{CONFIG_FILE} is rendered from spec.config; put the config there"
    if path.startswith(f"{CONFIG_FILE}/"):
        return f"{_shown(path)} is under {CONFIG_FILE}, which is rendered from spec.config: name another folder"
    if "//" in path or path.endswith("/"):
        once = "/".join(filter(None, path.split("/")))
        return f"{_shown(path)} has an empty folder name: write each path once, as {once}"
    if (size := len(path.encode())) > PATH_MAX_BYTES:
        return f"{_shown(path)} is {size} bytes; a path holds at most {PATH_MAX_BYTES}"
    for name in path.split("/"):
        if (size := len(name.encode())) > NAME_MAX_BYTES:
            limit = f"a file or folder name holds at most {NAME_MAX_BYTES}"
            return f"{_shown(name)} in {_shown(path)} is {size} bytes; {limit}"
    return ""


def file_paths_problem(paths: list[str]) -> str:
    """Why these paths cannot be one model's files together ("" where they can): each once, none under another."""
    duplicates = sorted({path for path in paths if paths.count(path) > 1})
    if duplicates:
        return f"each path may appear once; repeated: {', '.join(duplicates)}"
    files = set(paths)
    for path in sorted(paths):
        parts = path.split("/")
        if above := next(("/".join(parts[:end]) for end in range(1, len(parts)) if "/".join(parts[:end]) in files), ""):
            return f"{_shown(path)} is under {_shown(above)}, a file: a path is a file or a folder, not both"
    return ""


class FileItem(ApiModel):
    model_config = with_cel_rules(
        # The rest of file_path_problem is the path's pattern, or Python's alone (byte counts: CEL counts characters,
        # and a regex over each of a thousand paths went past the API server's cost budget).
        (
            f"self.path != '{CONFIG_FILE}' && !self.path.startsWith('{CONFIG_FILE}/')",
            "config.pbtxt is rendered from spec.config; put the config there",
        ),
        ("!self.path.endsWith('/')", "path has an empty folder name: write it once"),
    )

    key: str = Field(min_length=1, max_length=253, description="Key in the ConfigMap.")
    path: str = Field(
        min_length=1,
        max_length=PATH_MAX_BYTES,
        pattern=RELATIVE_PATH_PATTERN,  # segments of one spelling, no control characters
        description="Path inside the model directory, e.g. 1/model.py (not config.pbtxt, which comes from config); "
        "no control characters.",
    )

    @field_validator("path", mode="before")
    @classmethod
    def _inside_model_directory(cls, path: Any) -> Any:
        """Before the pattern, so that a path it refuses is refused in words."""
        if isinstance(path, str) and (problem := file_path_problem(without_control_characters(path))):
            raise ValueError(problem)
        return path


class ConfigMapFiles(ApiModel):
    name: str = Field(min_length=1, max_length=253, description="ConfigMap in the model's namespace.")
    items: list[FileItem] = Field(
        min_length=1,
        max_length=1024,
        description="Which keys become which files; each path once, none under another.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["path"]},
    )

    @field_validator("items")
    @classmethod
    def _unique_paths_and_a_version(cls, items: list[FileItem]) -> list[FileItem]:
        paths = [item.path for item in items]
        if problem := file_paths_problem(paths):
            raise ValueError(problem)
        if not any(re.match(VERSION_FOLDER, path) for path in paths):
            raise ValueError(NO_VERSION_FOLDER)
        return items


class ModelFiles(ApiModel):
    config_map_ref: ConfigMapFiles = Field(description="Model files sent with the load request.")


class ClientPool(ApiModel):
    """System shared-memory regions that clients in the pod (sidecars) register with Triton."""

    regions: int = Field(ge=0, description="Number of regions.")
    region_bytes: ByteQuantity = Field(description="Bytes per region.")


class ModelSharedMemory(ApiModel):
    client_pool: ClientPool | None = None
    execution_bytes: ByteQuantity | None = Field(
        default=None,
        description=(
            "Largest inputs plus outputs of one execution (a whole batch), for python-backend models with "
            "variable dims; computed from the config when every dim is fixed."
        ),
    )


# The operator applies a dedicated server's spec as written: a replica count there would undo the autoscaler's.
AUTOSCALED_REPLICAS = (
    "leave server.replicas out when server.autoscaling is set: the autoscaler sets the replicas of the model's "
    "TritonServer, and the operator would apply this count over it"
)


class ModelMemory(ApiModel):
    """What one copy of the model costs on a pod, as declared: placement counts it until the model is measured."""

    cpu: ByteQuantity | None = Field(
        default=None, description="Host memory: its instances' python stubs, weights, buffers."
    )
    gpu: ByteQuantity | None = Field(default=None, description="GPU memory, over all its instances.")


ONE_SERVER = (
    "set exactly one of serverRef (a shared TritonServer), server (a dedicated one) or serverSelector (any "
    "TritonServer with these labels and room for the model)"
)


class TritonModelSpec(ApiModel):
    model_config = with_cel_rules(
        (
            "(has(self.serverRef) ? 1 : 0) + (has(self.server) ? 1 : 0) + (has(self.serverSelector) ? 1 : 0) == 1",
            ONE_SERVER,
        ),
        (
            "!has(self.server) || !has(self.server.autoscaling) || !has(self.server.replicas)",
            AUTOSCALED_REPLICAS,
        ),
    )

    server_ref: LocalObjectReference | None = Field(
        default=None, description="The TritonServer that serves this model."
    )
    server: InlineServerSpec | None = Field(
        default=None,
        description="A dedicated server for this model (a child TritonServer named after the model): its sizes, "
        "resources and model settings. What else shapes the pod (image, extraArgs, pod, volumes and Secrets, Service, "
        "NetworkPolicy) is a TritonServer's: use serverRef for it.",
    )
    server_selector: LabelSelector | None = Field(
        default=None,
        description="Labels of the TritonServers in the model's namespace that may serve it: it is placed on one with "
        "room for its memory (best fit, largest models first; a placed model stays while it fits).",
    )
    memory: ModelMemory | None = Field(
        default=None,
        description="The model's memory on a pod, declared; placement counts it until the model is measured.",
    )
    model_name: ModelName | None = Field(
        default=None, description="Triton model name (default: metadata.name); may hold names like add_sub."
    )
    config: TritonModelConfig = Field(
        default={},
        validate_default=True,
        description="Triton's ModelConfig in protobuf's JSON mapping (camelCase, enum names); name is set by the "
        "operator.",
    )
    files: ModelFiles | None = None
    shared_memory: ModelSharedMemory = Field(default_factory=ModelSharedMemory)
    rollout: ModelRolloutSpec | None = Field(
        default=None,
        description="How a new revision reaches the pods; unset, or holding only a probe: the server's spec.rollout "
        "(default AllAtOnce).",
    )
    load_timeout_seconds: int | None = Field(
        default=None,
        gt=0,
        description=(
            "How long one load or reload of this model may take on a pod before it counts as failed (TensorRT engines "
            "and LLMs load for minutes); unset: the operator's load timeout (600 s by default). Changing it reloads "
            "nothing."
        ),
    )

    @field_validator("model_name", mode="before")
    @classmethod
    def _is_a_folder_name(cls, name: Any) -> Any:
        """The pattern in words (the CRD keeps the pattern itself)."""
        if isinstance(name, str) and not re.fullmatch(MODEL_NAME_PATTERN, name):
            suggested = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:255].lstrip(".-") or "add_sub"
            raise ValueError(
                f"{name!r} cannot be a Triton model name, which is a folder in the model repository: use letters, "
                f"digits, '_', '.' and '-', starting with a letter, digit or '_', at most 255 (e.g. '{suggested}')"
            )
        return name

    @field_validator("config")
    @classmethod
    def _is_triton_model_config(cls, config: dict[str, Any]) -> modelconfig.ParsedConfig:
        return modelconfig.ParsedConfig(config)

    def parsed_config(self) -> modelconfig.ModelConfig:
        """A copy of the message the config was parsed into when validated, for the caller to add to."""
        return cast(modelconfig.ParsedConfig, self.config).message()

    @model_validator(mode="after")
    def _one_server(self) -> Self:
        given = [
            name
            for name, value in (
                ("serverRef", self.server_ref),
                ("server", self.server),
                ("serverSelector", self.server_selector),
            )
            if value is not None
        ]
        if len(given) != 1:
            raise ValueError(f"{ONE_SERVER}; {'none is set' if not given else ' and '.join(given) + ' are set'}")
        if (
            self.server is not None
            and self.server.autoscaling is not None
            and "replicas" in self.server.model_fields_set
        ):
            raise ValueError(AUTOSCALED_REPLICAS)
        return self
