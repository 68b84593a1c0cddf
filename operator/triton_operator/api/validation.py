"""Semantic checks Triton makes when it loads a config, made before any server sees it.

Triton answers a rejected config with HTTP 500 "failed to poll from model repository" and keeps
the reason in its log (docs/triton-facts.md), so every rule of Triton's `ValidateModelConfig`,
`ValidateModelIOConfig`, `ValidateBatchIO` and `ValidateInstanceGroup` that a config alone can
decide is repeated here, with a message naming the field and what to do. Warnings flag configs
Triton accepts that do not do what their authors expect.

These are the checks of a config alone; the batchers' are in batcher_checks.py, those that need the
server, the files or the probe in server_checks.py and probe_checks.py.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from ..protocol.triton_proto import model_config_pb2 as pb
from .batcher_checks import check_dynamic_batching, check_sequence_batching
from .config_strings import check_config_strings
from .findings import Finding, Findings

WILDCARD_DIM = -1
ENSEMBLE_PLATFORM = "ensemble"
PYTHON_BACKEND = "python"
FORCE_CPU_ONLY_INPUT_TENSORS = "FORCE_CPU_ONLY_INPUT_TENSORS"
# Backends Triton checks against the platform; others accept any platform.
PLATFORMS_OF_BACKEND = {
    "tensorflow": {"tensorflow_graphdef", "tensorflow_savedmodel"},
    "tensorrt": {"tensorrt_plan"},
    "onnxruntime": {"onnxruntime_onnx"},
    "pytorch": {"pytorch_libtorch", "libtorch", "torch_aoti"},
}
BACKEND_OF_PLATFORM = {
    platform: backend for backend, platforms in PLATFORMS_OF_BACKEND.items() for platform in platforms
}


def element_count(dims: Sequence[int]) -> int:
    """Triton's GetElementCount: -1 when any dim is variable, 0 for no dims, else the product."""
    if not dims:
        return 0
    if WILDCARD_DIM in dims:
        return WILDCARD_DIM
    return math.prod(dims)


def _fixed_segments(dims: Sequence[int]) -> list[int]:
    """Products of the runs between variable dims, as Triton compares dims with reshape."""
    segments, product = [], 1
    for dim in dims:
        if dim == WILDCARD_DIM:
            segments.append(product)
            product = 1
        else:
            product *= dim
    return [*segments, product]


def validate_model_config(config: pb.ModelConfig, path: str = "spec.config") -> list[Finding]:
    """Every check that needs only the config."""
    found = Findings()
    if config.max_batch_size < 0:
        found.error(f"{path}.maxBatchSize", "must be >= 0 (0 turns batching off)")
    _check_backend(config, path, found)
    check_config_strings(config, path, found)
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for index, tensor in enumerate(tensors):
            _check_tensor(config, tensor, f"{path}.{kind}[{index}]", kind, found)
        _check_unique_names(tensors, f"{path}.{kind}", found)
    _check_ragged(config, path, found)
    _check_batch_io(config, path, found)
    if config.HasField("dynamic_batching"):
        check_dynamic_batching(config, f"{path}.dynamicBatching", found)
        if config.max_batch_size == 0:
            found.warning(
                f"{path}.dynamicBatching",
                "does nothing with maxBatchSize 0: the model takes no batch dimension, so no two requests run as one "
                "batch; set maxBatchSize to the largest batch the model takes, or remove dynamicBatching",
            )
    if config.HasField("sequence_batching"):
        check_sequence_batching(config, f"{path}.sequenceBatching", found)
    _check_ensemble(config, path, found)
    _check_instance_groups(config, path, found)
    _check_warmup(config, path, found)
    _check_policies(config, path, found)
    _check_python_gpu(config, path, found)
    _check_python_tensors(config, path, found)
    return found


def effective_backend(config: pb.ModelConfig) -> str:
    """The backend Triton runs: `backend`, or the one a known platform implies ("" if unknown)."""
    return config.backend or BACKEND_OF_PLATFORM.get(config.platform, "")


def models_by_backend(configs: Iterable[pb.ModelConfig]) -> dict[str, list[str]]:
    """Which models run on each backend, by Triton's name, backends sorted; a model of unknown backend
    (and an ensemble, which Triton's core runs) names none."""
    users: dict[str, list[str]] = {}
    for config in configs:
        if backend := effective_backend(config):
            users.setdefault(backend, []).append(config.name)
    return dict(sorted(users.items()))


def _not_tensorrt(config: pb.ModelConfig) -> bool:
    """Known to run elsewhere than TensorRT (with neither backend nor platform, Triton may find a plan file)."""
    backend = effective_backend(config)
    return (bool(backend) and backend != "tensorrt") or config.platform == ENSEMBLE_PLATFORM


def _check_backend(config: pb.ModelConfig, path: str, found: Findings) -> None:
    if config.platform == ENSEMBLE_PLATFORM:
        return
    if not config.backend and config.platform:
        if config.platform not in BACKEND_OF_PLATFORM:
            found.error(f"{path}.platform", f"unknown platform '{config.platform}' for Triton: set backend instead")
    elif not config.backend:
        found.warning(
            f"{path}.backend",
            "no backend or platform: Triton will guess one from the model files in the repository; set backend "
            "(e.g. python, onnxruntime) to be explicit",
        )
    platforms = PLATFORMS_OF_BACKEND.get(config.backend)
    if platforms and config.platform and config.platform not in platforms:
        found.error(
            f"{path}.platform",
            f"platform '{config.platform}' does not go with backend '{config.backend}'; "
            f"use one of {', '.join(sorted(platforms))} or leave platform out",
        )


def _check_tensor(
    config: pb.ModelConfig, tensor: pb.ModelInput | pb.ModelOutput, path: str, kind: str, found: Findings
) -> None:
    if not tensor.name:
        found.error(f"{path}.name", f"every {kind} needs a name")
    if tensor.data_type == pb.TYPE_INVALID:
        found.error(f"{path}.dataType", "set a dataType, e.g. TYPE_FP32 (TYPE_STRING for bytes)")
    if not tensor.dims:
        found.error(f"{path}.dims", "set dims: the shape without the batch dimension, e.g. [3, 224, 224] or [-1]")
    for index, dim in enumerate(tensor.dims):
        if dim < 1 and dim != WILDCARD_DIM:
            found.error(f"{path}.dims[{index}]", f"is {dim}; use a size >= 1, or -1 for a variable size")
    if tensor.HasField("reshape"):
        _check_reshape(config, tensor, f"{path}.reshape", found)
    if (
        kind == "input"
        and tensor.format in (pb.ModelInput.FORMAT_NHWC, pb.ModelInput.FORMAT_NCHW)
        and len(tensor.dims) != 3
    ):
        found.error(
            f"{path}.format",
            f"{pb.ModelInput.Format.Name(tensor.format)} needs exactly 3 dims; fix dims or drop format",
        )
    if _not_tensorrt(config):
        if tensor.is_shape_tensor:
            found.error(f"{path}.isShapeTensor", "shape tensors are only supported on platform tensorrt_plan")
        if tensor.is_non_linear_format_io:
            found.error(
                f"{path}.isNonLinearFormatIo", "non-linear IO formats are only supported on platform tensorrt_plan"
            )


def _check_reshape(config: pb.ModelConfig, tensor: pb.ModelInput | pb.ModelOutput, path: str, found: Findings) -> None:
    shape = list(tensor.reshape.shape)
    if not shape and config.max_batch_size == 0:
        found.error(f"{path}.shape", "an empty reshape (a scalar) needs batching: set maxBatchSize > 0 or give a shape")
    for index, dim in enumerate(shape):
        if dim < 1 and dim != WILDCARD_DIM:
            found.error(f"{path}.shape[{index}]", f"is {dim}; use a size >= 1, or -1 for a variable size")
    dims_count, shape_count = element_count(tensor.dims), element_count(shape)
    if dims_count != shape_count and (shape_count != 0 or dims_count != 1):
        found.error(
            f"{path}.shape",
            f"holds {_describe_count(shape_count)} but dims {list(tensor.dims)} hold {_describe_count(dims_count)}; "
            "a reshape must keep the element count (an empty reshape only fits dims of one element)",
        )
    elif dims_count == WILDCARD_DIM:
        dims_segments, shape_segments = _fixed_segments(tensor.dims), _fixed_segments(shape)
        if len(dims_segments) != len(shape_segments):
            found.error(f"{path}.shape", "must have as many variable (-1) dims as dims has")
        elif dims_segments != shape_segments:
            found.error(f"{path}.shape", "the fixed dims between the -1s must hold the same element counts as in dims")


def _describe_count(count: int) -> str:
    return "a variable number of elements" if count == WILDCARD_DIM else f"{count} elements"


def _check_unique_names(tensors: Sequence[pb.ModelInput | pb.ModelOutput], path: str, found: Findings) -> None:
    for name, count in Counter(tensor.name for tensor in tensors if tensor.name).items():
        if count > 1:
            found.error(path, f"name '{name}' is used {count} times; Triton would silently keep only one")


def _check_ragged(config: pb.ModelConfig, path: str, found: Findings) -> None:
    for index, tensor in enumerate(config.input):
        input_path = f"{path}.input[{index}]"
        if tensor.allow_ragged_batch and config.max_batch_size == 0:
            found.error(f"{input_path}.allowRaggedBatch", "ragged batching needs batching: set maxBatchSize > 0")
        variable = WILDCARD_DIM in tensor.dims
        batching = config.HasField("dynamic_batching") and config.max_batch_size > 0
        if batching and variable and not tensor.allow_ragged_batch and not tensor.is_shape_tensor:
            found.warning(
                f"{input_path}.allowRaggedBatch",
                f"input '{tensor.name}' has variable dims {list(tensor.dims)} under dynamicBatching: requests of "
                "different shapes will not be batched together (each shape forms its own small batches). "
                "Set allowRaggedBatch: true if the model accepts ragged input",
            )


def _check_batch_io(config: pb.ModelConfig, path: str, found: Findings) -> None:
    inputs = {tensor.name for tensor in config.input}
    outputs = {tensor.name for tensor in config.output}
    for index, batch_input in enumerate(config.batch_input):
        item = f"{path}.batchInput[{index}]"
        kind = pb.BatchInput.Kind.Name(batch_input.kind)
        if len(batch_input.source_input) != 1:
            found.error(
                f"{item}.sourceInput", f"kind {kind} takes exactly 1 source input, got {len(batch_input.source_input)}"
            )
        if not batch_input.target_name:
            found.error(f"{item}.targetName", "name the tensor the backend receives, e.g. [INDEX]")
        if batch_input.data_type not in (pb.TYPE_INT32, pb.TYPE_FP32):
            found.error(f"{item}.dataType", "must be TYPE_INT32 or TYPE_FP32")
        _check_known(batch_input.source_input, inputs, f"{item}.sourceInput", "input", found)
    for index, batch_output in enumerate(config.batch_output):
        item = f"{path}.batchOutput[{index}]"
        if batch_output.kind != pb.BatchOutput.BATCH_SCATTER_WITH_INPUT_SHAPE:
            found.error(f"{item}.kind", "only BATCH_SCATTER_WITH_INPUT_SHAPE is supported")
        if len(batch_output.source_input) != 1:
            found.error(f"{item}.sourceInput", f"takes exactly 1 source input, got {len(batch_output.source_input)}")
        if not batch_output.target_name:
            found.error(f"{item}.targetName", "name at least one output to scatter")
        _check_known(batch_output.source_input, inputs, f"{item}.sourceInput", "input", found)
        _check_known(batch_output.target_name, outputs, f"{item}.targetName", "output", found)
        for name, count in Counter(batch_output.target_name).items():
            if count > 1:
                found.error(f"{item}.targetName", f"output '{name}' may be named once")


def _check_known(names: Iterable[str], known: set[str], path: str, kind: str, found: Findings) -> None:
    for name in names:
        if name not in known:
            found.error(
                path,
                f"'{name}' is not an {kind} of the model; use one of: {', '.join(sorted(known)) or f'(no {kind}s)'}",
            )


def _check_ensemble(config: pb.ModelConfig, path: str, found: Findings) -> None:
    ensemble = config.platform == ENSEMBLE_PLATFORM
    if config.HasField("ensemble_scheduling") and not ensemble:
        found.error(f"{path}.ensembleScheduling", "only for platform 'ensemble': set platform: ensemble or remove it")
    if not ensemble:
        return
    if config.backend:
        found.error(f"{path}.backend", "an ensemble has no backend: remove backend")
    if not config.HasField("ensemble_scheduling"):
        found.error(f"{path}.ensembleScheduling", "an ensemble needs ensembleScheduling.step")
    if config.instance_group:
        found.error(f"{path}.instanceGroup", "an ensemble has no instances of its own: remove instanceGroup")
    if config.HasField("optimization"):
        found.error(f"{path}.optimization", "an ensemble takes no optimization settings: remove optimization")
    if config.model_warmup:
        found.error(f"{path}.modelWarmup", "Triton does not warm up ensembles: warm up the models in its steps instead")
    steps = config.ensemble_scheduling.step
    if config.HasField("ensemble_scheduling") and not steps:
        found.error(f"{path}.ensembleScheduling.step", "list the models the ensemble runs")
    written: dict[str, int] = {}
    for index, step in enumerate(steps):
        item = f"{path}.ensembleScheduling.step[{index}]"
        for field, json_name in (("model_name", "modelName"), ("input_map", "inputMap"), ("output_map", "outputMap")):
            if not getattr(step, field):
                found.error(f"{item}.{json_name}", "must be set")
        for tensor in step.output_map.values():
            if tensor in written:
                found.error(
                    f"{item}.outputMap", f"ensemble tensor '{tensor}' is already written by step {written[tensor]}"
                )
            written.setdefault(tensor, index)


def _check_instance_groups(config: pb.ModelConfig, path: str, found: Findings) -> None:
    for index, group in enumerate(config.instance_group):
        item = f"{path}.instanceGroup[{index}]"
        if group.count < 0:
            found.error(f"{item}.count", f"is {group.count}; use a count >= 1 (0 means Triton's default)")
        if group.kind in (pb.ModelInstanceGroup.KIND_CPU, pb.ModelInstanceGroup.KIND_MODEL) and group.gpus:
            kind = pb.ModelInstanceGroup.Kind.Name(group.kind)
            found.error(f"{item}.gpus", f"kind {kind} runs on no GPU: remove gpus or use kind KIND_GPU")
        for gpu_index, gpu in enumerate(group.gpus):
            if gpu < 0:
                found.error(f"{item}.gpus[{gpu_index}]", f"is {gpu}; GPU ids start at 0")
        if group.profile and _not_tensorrt(config):
            found.error(f"{item}.profile", "optimization profiles are only for platform tensorrt_plan")


def _check_warmup(config: pb.ModelConfig, path: str, found: Findings) -> None:
    for index, sample in enumerate(config.model_warmup):
        item = f"{path}.modelWarmup[{index}]"
        if config.max_batch_size > 0 and sample.batch_size > config.max_batch_size:
            found.error(f"{item}.batchSize", f"is {sample.batch_size}, above maxBatchSize {config.max_batch_size}")
        if config.max_batch_size == 0 and sample.batch_size > 1:
            found.error(f"{item}.batchSize", "must be 1 for a model without batching (maxBatchSize 0)")
        for name, data in sorted(sample.inputs.items()):
            if WILDCARD_DIM in data.dims:
                found.error(f"{item}.inputs.{name}.dims", "warmup needs every dim fixed: replace -1 with a size")
            if data.WhichOneof("input_data_type") is None:
                found.error(f"{item}.inputs.{name}", "set zeroData, randomData or inputDataFile")


def _check_policies(config: pb.ModelConfig, path: str, found: Findings) -> None:
    if config.model_transaction_policy.decoupled and config.response_cache.enable:
        found.error(f"{path}.responseCache.enable", "the response cache does not work with decoupled models")
    policy = config.version_policy
    if policy.HasField("latest") and policy.latest.num_versions == 0:
        found.error(f"{path}.versionPolicy.latest.numVersions", "0 loads no version: use 1 or more")
    force_cpu = config.parameters.get(FORCE_CPU_ONLY_INPUT_TENSORS)
    if config.backend == PYTHON_BACKEND and force_cpu is not None and force_cpu.string_value not in ("yes", "no"):
        found.error(
            f"{path}.parameters.{FORCE_CPU_ONLY_INPUT_TENSORS}.stringValue",
            f"the python backend takes exactly 'yes' or 'no', got '{force_cpu.string_value}'",
        )


def _check_python_gpu(config: pb.ModelConfig, path: str, found: Findings) -> None:
    if config.backend != PYTHON_BACKEND:
        return
    for index, group in enumerate(config.instance_group):
        if group.kind != pb.ModelInstanceGroup.KIND_GPU:
            continue
        force_cpu = config.parameters.get(FORCE_CPU_ONLY_INPUT_TENSORS)
        inputs = (
            ""
            if force_cpu and force_cpu.string_value == "no"
            else ("; inputs arrive on the CPU unless parameters.FORCE_CPU_ONLY_INPUT_TENSORS is 'no'")
        )
        found.warning(
            f"{path}.instanceGroup[{index}].kind",
            "on the python backend KIND_GPU only tells model.py its device (args['model_instance_device_id']): "
            f"the code must put its model and tensors on the GPU itself{inputs}",
        )


def _check_python_tensors(config: pb.ModelConfig, path: str, found: Findings) -> None:
    """A python model may leave its inputs and outputs to model.py's auto_complete_config, which the operator's
    servers never call (they run with auto-complete disabled): the model would load without them."""
    if effective_backend(config) != PYTHON_BACKEND or (config.input and config.output):
        return
    missing = " and ".join(
        kind for kind, tensors in (("inputs", config.input), ("outputs", config.output)) if not tensors
    )
    found.warning(
        f"{path}.{'input' if not config.input else 'output'}",
        f"a python model with no {missing}: the operator's servers run with Triton's auto-complete disabled, so "
        "model.py's auto_complete_config is never asked for them and the model loads without them; write them "
        "here, or, where its model.py defines auto_complete_config, run `triton-operator import` on the model's "
        "folder to have Triton complete its config",
    )
