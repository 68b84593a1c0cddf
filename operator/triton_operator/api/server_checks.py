"""Checks of a model that need more than its config: the server it runs on (backends, GPUs, where its
files come from, the GPU product) and the files it comes with (the python backend's environment).

Apart from the config's own checks, which need the config alone and run once for every model.
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection

from ..protocol.triton_proto import model_config_pb2 as pb
from .findings import Finding, Findings
from .pod_resources import GPU_PRODUCT_LABEL, GPU_PRODUCT_MEMORY_MIB
from .server import TritonServerSpec
from .validation import ENSEMBLE_PLATFORM, PYTHON_BACKEND, effective_backend

EXECUTION_ENV_PATH = "EXECUTION_ENV_PATH"
MODEL_DIRECTORY_VARIABLE = "$$TRITON_MODEL_DIRECTORY"


def validate_against_server(
    config: pb.ModelConfig, server: TritonServerSpec, has_files: bool, path: str = "spec.config"
) -> list[Finding]:
    """Checks that need the server the model runs on; `has_files`: the model's files come with it (spec.files)."""
    found = Findings()
    gpus = server.gpus.count
    backend = effective_backend(config)
    if backend and backend not in server.backends:
        found.error(
            f"{path}.backend",
            f"backend '{backend}' is not among the server's backends ({', '.join(server.backends)}): its Triton cannot "
            "load the model; list it in the server's spec.backends (with an image that has it), or use one of those",
        )
    repository = server.model_repository
    if not has_files and config.platform != ENSEMBLE_PLATFORM and repository.pvc is None and repository.uri is None:
        found.error(
            "spec.files",
            "the model has no files and its server no spec.modelRepository (pvc or uri) to load them from: Triton "
            "would answer 'model not found in any model repository'; give them with files.configMapRef (e.g. path: "
            "1/model.py), or put the model's folder into a repository the server names",
        )
    for index, group in enumerate(config.instance_group):
        item = f"{path}.instanceGroup[{index}]"
        if group.kind == pb.ModelInstanceGroup.KIND_GPU and gpus == 0:
            found.error(
                f"{item}.kind",
                "KIND_GPU needs GPUs, and the server has none: set the server's gpus.count or use KIND_CPU",
            )
        for gpu_index, gpu in enumerate(group.gpus):
            if gpus and gpu >= gpus:
                found.error(
                    f"{item}.gpus[{gpu_index}]",
                    f"GPU {gpu} does not exist: the server's pods have {gpus} (ids 0..{gpus - 1})",
                )
    return found


def validate_gpu_product(server: TritonServerSpec) -> list[Finding]:
    """gpus.product against what else says where the pods run and what their GPUs hold: a product whose
    memory is not known leaves capacity.gpuMemory uncounted, and a product label in pod.nodeSelector that
    differs wins there, so the pods would run on other GPUs than the ones counted."""
    found = Findings()
    product = server.gpus.product
    if product is None:
        return found
    selected = server.pod.node_selector.get(GPU_PRODUCT_LABEL)
    if selected is not None and selected != product:
        found.warning(
            "spec.gpus.product",
            f"is '{product}', and spec.pod.nodeSelector sets {GPU_PRODUCT_LABEL} to '{selected}', which wins: the pods "
            f"run on {selected} while GPU memory is counted for {product}; make the two agree, or drop one",
        )
    if product not in GPU_PRODUCT_MEMORY_MIB and server.capacity.gpu_memory is None:
        found.warning(
            "spec.gpus.product",
            f"'{product}' is not a GPU whose memory the operator knows, so capacity.gpuMemory is not counted unless "
            "set: set it (one pod's GPU memory, over its GPUs), or use a known product: "
            f"{', '.join(GPU_PRODUCT_MEMORY_MIB)}",
        )
    return found


def validate_execution_env(
    config: pb.ModelConfig, files: Collection[str] | None, path: str = "spec.config"
) -> list[Finding]:
    """The python backend's execution environment (parameters.EXECUTION_ENV_PATH: a venv-pack or
    conda-pack tarball, or an unpacked environment) must be where Triton looks when it loads the model.
    `files`: the paths of the model's files when they come with it (spec.files); None when the model
    loads from the server's modelRepository, which the operator cannot look into.

    Measured on Triton 2.51: a relative path and a missing one fail the load with "Failed to get the
    canonical path for ..."; `$$TRITON_MODEL_DIRECTORY` is the model's folder in the repository, or
    the folder Triton writes the files of a load request to, so `$$TRITON_MODEL_DIRECTORY/env.tar.gz`
    works both ways; an absolute path is read from the pod's own filesystem."""
    found = Findings()
    parameter = config.parameters.get(EXECUTION_ENV_PATH)
    if parameter is None:
        return found
    where = f"{path}.parameters.{EXECUTION_ENV_PATH}.stringValue"
    value = parameter.string_value
    backend = effective_backend(config)
    if backend != PYTHON_BACKEND:
        found.warning(
            where,
            f"only the python backend runs a model in an execution environment; backend '{backend or 'unknown'}' "
            "ignores it",
        )
        return found
    prefix = MODEL_DIRECTORY_VARIABLE + "/"
    if value.startswith("/"):
        found.warning(
            where,
            f"'{value}' is read from each pod's filesystem, which the operator cannot check: it must be in the "
            "server's image (spec.image) at that path; to ship the environment with the model, put it in the model's "
            f"folder and write '{prefix}env.tar.gz'",
        )
        return found
    if not value.startswith(prefix):
        found.error(
            where,
            f"'{value}' is not a path Triton can find (it fails the load: 'Failed to get the canonical path'): write "
            f"'{prefix}{value or 'env.tar.gz'}' for a file in the model's folder",
        )
        return found
    relative = posixpath.normpath(value[len(prefix) :])
    if relative in (".", "..") or relative.startswith("../"):
        found.error(
            where,
            f"'{value}' is outside the model's folder: name the environment's file in it, e.g. '{prefix}env.tar.gz'",
        )
    elif files is not None and relative not in files and not any(name.startswith(relative + "/") for name in files):
        found.error(
            where,
            f"'{relative}' is not among the model's files ({', '.join(sorted(files)) or 'none'}): Triton would fail "
            "the load; an environment rarely fits a ConfigMap (1 MiB at most), so put the model's folder with it into "
            "the server's spec.modelRepository and drop spec.files",
        )
    return found
