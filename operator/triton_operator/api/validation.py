"""Semantic checks Triton makes when it loads a config, made before any server sees it.

Triton answers a rejected config with HTTP 500 "failed to poll from model repository" and keeps
the reason in its log (docs/triton-facts.md), so every rule of Triton's `ValidateModelConfig`,
`ValidateModelIOConfig`, `ValidateBatchIO` and `ValidateInstanceGroup` that a config alone can
decide is repeated here, with a message naming the field and what to do. Warnings flag configs
Triton accepts that do not do what their authors expect.
"""

from __future__ import annotations

import math
import posixpath
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from ..protocol.model_config import model_config_pb2 as pb
from ..protocol.model_config import wire_datatype
from .pod_resources import GPU_PRODUCT_LABEL, GPU_PRODUCT_MEMORY_MIB
from .rollout import ProbeSpec, ProbeTensor
from .server import TritonServerSpec

WILDCARD_DIM = -1
ENSEMBLE_PLATFORM = "ensemble"
PYTHON_BACKEND = "python"
FORCE_CPU_ONLY_INPUT_TENSORS = "FORCE_CPU_ONLY_INPUT_TENSORS"
EXECUTION_ENV_PATH = "EXECUTION_ENV_PATH"
MODEL_DIRECTORY_VARIABLE = "$$TRITON_MODEL_DIRECTORY"
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
CORRID_TYPES = {pb.TYPE_UINT64, pb.TYPE_INT64, pb.TYPE_UINT32, pb.TYPE_INT32, pb.TYPE_STRING}
BOOLEAN_CONTROLS = (
    pb.ModelSequenceBatching.Control.CONTROL_SEQUENCE_START,
    pb.ModelSequenceBatching.Control.CONTROL_SEQUENCE_END,
    pb.ModelSequenceBatching.Control.CONTROL_SEQUENCE_READY,
)
CONTROL_VALUE_LISTS = ("int32_false_true", "fp32_false_true", "bool_false_true")
CONTROL_VALUE_JSON = {
    "int32_false_true": "int32FalseTrue",
    "fp32_false_true": "fp32FalseTrue",
    "bool_false_true": "boolFalseTrue",
}


@dataclass(frozen=True)
class Finding:
    """One problem: in which object, where in it (a field path), what is wrong and what to do."""

    severity: Literal["error", "warning"]
    path: str
    message: str
    obj: str = ""  # Kind/namespace/name, once known
    file: str = ""  # the file it came from (with :line where YAML gives one), when read from files

    @property
    def where(self) -> str:
        return ": ".join(part for part in (self.obj, self.path) if part)

    def __str__(self) -> str:
        return ": ".join(part for part in (self.severity, self.file, self.where, self.message) if part)


class _Findings(list[Finding]):
    def error(self, path: str, message: str) -> None:
        self.append(Finding("error", path, message))

    def warning(self, path: str, message: str) -> None:
        self.append(Finding("warning", path, message))


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [finding for finding in findings if finding.severity == "error"]


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
    found = _Findings()
    if config.max_batch_size < 0:
        found.error(f"{path}.maxBatchSize", "must be >= 0 (0 turns batching off)")
    _check_backend(config, path, found)
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for index, tensor in enumerate(tensors):
            _check_tensor(config, tensor, f"{path}.{kind}[{index}]", kind, found)
        _check_unique_names(tensors, f"{path}.{kind}", found)
    _check_ragged(config, path, found)
    _check_batch_io(config, path, found)
    if config.HasField("dynamic_batching"):
        _check_dynamic_batching(config, f"{path}.dynamicBatching", found)
        if config.max_batch_size == 0:
            found.warning(
                f"{path}.dynamicBatching",
                "does nothing with maxBatchSize 0: the model takes no batch dimension, so no two requests run as one "
                "batch; set maxBatchSize to the largest batch the model takes, or remove dynamicBatching",
            )
    if config.HasField("sequence_batching"):
        _check_sequence_batching(config, f"{path}.sequenceBatching", found)
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


def _check_backend(config: pb.ModelConfig, path: str, found: _Findings) -> None:
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
    config: pb.ModelConfig, tensor: pb.ModelInput | pb.ModelOutput, path: str, kind: str, found: _Findings
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


def _check_reshape(config: pb.ModelConfig, tensor: pb.ModelInput | pb.ModelOutput, path: str, found: _Findings) -> None:
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


def _check_unique_names(tensors: Sequence[pb.ModelInput | pb.ModelOutput], path: str, found: _Findings) -> None:
    for name, count in Counter(tensor.name for tensor in tensors if tensor.name).items():
        if count > 1:
            found.error(path, f"name '{name}' is used {count} times; Triton would silently keep only one")


def _check_ragged(config: pb.ModelConfig, path: str, found: _Findings) -> None:
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


def _check_batch_io(config: pb.ModelConfig, path: str, found: _Findings) -> None:
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


def _check_known(names: Iterable[str], known: set[str], path: str, kind: str, found: _Findings) -> None:
    for name in names:
        if name not in known:
            found.error(
                path,
                f"'{name}' is not an {kind} of the model; use one of: {', '.join(sorted(known)) or f'(no {kind}s)'}",
            )


def _check_dynamic_batching(config: pb.ModelConfig, path: str, found: _Findings) -> None:
    batching = config.dynamic_batching
    for index, size in enumerate(batching.preferred_batch_size):
        if size <= 0:
            found.error(f"{path}.preferredBatchSize[{index}]", f"is {size}; preferred batch sizes must be >= 1")
        elif size > config.max_batch_size:
            found.error(
                f"{path}.preferredBatchSize[{index}]",
                f"is {size}, above maxBatchSize {config.max_batch_size}; lower it or raise maxBatchSize",
            )
    levels = batching.priority_levels
    if levels:
        if not 1 <= batching.default_priority_level <= levels:
            found.error(f"{path}.defaultPriorityLevel", f"must be in 1..{levels} (priorityLevels)")
        for level in batching.priority_queue_policy:
            if not 1 <= level <= levels:
                found.error(
                    f"{path}.priorityQueuePolicy.{level}", f"priority level must be in 1..{levels} (priorityLevels)"
                )
    if batching.preserve_ordering:
        if levels > 1:
            found.error(f"{path}.preserveOrdering", "allows only one priority level: set priorityLevels to 0 or 1")
        policies = [("defaultQueuePolicy", batching.default_queue_policy)] + [
            (f"priorityQueuePolicy.{level}", policy) for level, policy in sorted(batching.priority_queue_policy.items())
        ]
        for name, policy in policies:
            if policy.default_timeout_microseconds and policy.timeout_action == pb.ModelQueuePolicy.DELAY:
                found.error(f"{path}.{name}.timeoutAction", "DELAY cannot be used with preserveOrdering; use REJECT")


def _check_sequence_batching(config: pb.ModelConfig, path: str, found: _Findings) -> None:
    batching = config.sequence_batching
    if config.response_cache.enable:
        found.error(
            f"{path.rsplit('.', 1)[0]}.responseCache.enable", "the response cache does not work with sequence batching"
        )
    names = Counter(control.name for control in batching.control_input)
    kinds: set[int] = set()
    for index, control_input in enumerate(batching.control_input):
        item = f"{path}.controlInput[{index}]"
        if not control_input.name:
            found.error(f"{item}.name", "every control input needs the name of its tensor")
        elif names[control_input.name] > 1:
            found.error(
                f"{item}.name", f"tensor '{control_input.name}' is listed in more than one controlInput; list it once"
            )
        for control_index, control in enumerate(control_input.control):
            _check_control(control, f"{item}.control[{control_index}]", kinds, found)
    if batching.HasField("oldest"):
        for index, size in enumerate(batching.oldest.preferred_batch_size):
            if not 1 <= size <= config.max_batch_size:
                found.error(
                    f"{path}.oldest.preferredBatchSize[{index}]",
                    f"is {size}; must be in 1..maxBatchSize ({config.max_batch_size})",
                )
    if batching.HasField("direct") and not 0.0 <= batching.direct.minimum_slot_utilization <= 1.0:
        found.error(f"{path}.direct.minimumSlotUtilization", "must be between 0 and 1")


def _check_control(control: pb.ModelSequenceBatching.Control, path: str, kinds: set[int], found: _Findings) -> None:
    kind_name = pb.ModelSequenceBatching.Control.Kind.Name(control.kind)
    if control.kind in kinds:
        found.error(f"{path}.kind", f"{kind_name} is given more than once; each control kind goes to one tensor")
    kinds.add(control.kind)
    lists = [name for name in CONTROL_VALUE_LISTS if getattr(control, name)]
    if control.kind in BOOLEAN_CONTROLS:
        if len(lists) != 1:
            found.error(
                path,
                f"{kind_name} needs exactly one of int32FalseTrue, fp32FalseTrue or boolFalseTrue (the false and true values)",
            )
        elif len(getattr(control, lists[0])) != 2:
            found.error(
                f"{path}.{CONTROL_VALUE_JSON[lists[0]]}", "must hold exactly 2 values: [false value, true value]"
            )
    elif control.kind == pb.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID:
        if lists:
            found.error(
                path, "CONTROL_SEQUENCE_CORRID takes a dataType, not int32FalseTrue/fp32FalseTrue/boolFalseTrue"
            )
        if control.data_type not in CORRID_TYPES:
            found.error(
                f"{path}.dataType",
                "set TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING for the correlation id",
            )


def _check_ensemble(config: pb.ModelConfig, path: str, found: _Findings) -> None:
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


def _check_instance_groups(config: pb.ModelConfig, path: str, found: _Findings) -> None:
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


def _check_warmup(config: pb.ModelConfig, path: str, found: _Findings) -> None:
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


def _check_policies(config: pb.ModelConfig, path: str, found: _Findings) -> None:
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


def _check_python_gpu(config: pb.ModelConfig, path: str, found: _Findings) -> None:
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


def _shape_fits(shape: Sequence[int], dims: Sequence[int], max_batch_size: int) -> bool:
    """A request's shape fits an input: a batch size within maxBatchSize first when the model batches, then each dim (-1: any size)."""
    if max_batch_size > 0:
        if not shape or not 1 <= shape[0] <= max_batch_size:
            return False
        shape = shape[1:]
    return len(shape) == len(dims) and all(dim in (WILDCARD_DIM, size) for size, dim in zip(shape, dims, strict=False))


def validate_probe(probe: ProbeSpec | None, config: pb.ModelConfig, path: str = "spec.rollout.probe") -> list[Finding]:
    """The probe's tensors against the config's: Triton refuses a request naming an input it lacks, of another
    datatype or shape, or missing a required input, so a probe that does is an error here; an expected
    output the model does not declare, or could not answer in that datatype or shape, could never match."""
    found = _Findings()
    if probe is None or probe.inputs is None:
        return found
    _check_tensors(probe.inputs, config.input, config.max_batch_size, f"{path}.inputs", "input", found)
    _check_tensors(
        probe.expected_outputs or [], config.output, config.max_batch_size, f"{path}.expectedOutputs", "output", found
    )
    given_names = {given.name for given in probe.inputs}
    for tensor in config.input:
        if not tensor.optional and tensor.name not in given_names:
            found.error(
                f"{path}.inputs", f"input '{tensor.name}' is required: add it (only optional inputs may be left out)"
            )
    return found


def _check_tensors(
    given_tensors: list[ProbeTensor],
    config_tensors: Sequence[pb.ModelInput | pb.ModelOutput],
    max_batch_size: int,
    path: str,
    kind: str,
    found: _Findings,
) -> None:
    declared = {tensor.name: tensor for tensor in config_tensors}
    for index, given in enumerate(given_tensors):
        item = f"{path}[{index}]"
        tensor = declared.get(given.name)
        if tensor is None:
            found.error(
                f"{item}.name",
                f"'{given.name}' is not an {kind} of the model; its {kind}s: {', '.join(declared) or 'none'}",
            )
            continue
        if given.datatype != wire_datatype(tensor.data_type):
            found.error(
                f"{item}.datatype",
                f"is {given.datatype}, {kind} '{tensor.name}' is {pb.DataType.Name(tensor.data_type)}: use {wire_datatype(tensor.data_type)}",
            )
        if not _shape_fits(given.shape, tensor.dims, max_batch_size):
            batch = [f"1..{max_batch_size}"] if max_batch_size > 0 else []
            wanted = ", ".join([*batch, *("any" if dim == WILDCARD_DIM else str(dim) for dim in tensor.dims)])
            first = "the batch size first, as maxBatchSize > 0, then " if batch else ""
            found.error(
                f"{item}.shape",
                f"{given.shape} does not fit {kind} '{tensor.name}': it takes [{wanted}] ({first}dims {list(tensor.dims)})",
            )


def _check_python_tensors(config: pb.ModelConfig, path: str, found: _Findings) -> None:
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
        "model.py's auto_complete_config is never asked for them and the model loads without them; run `triton-operator "
        "import` on the model's folder to have Triton complete its config, or write them here",
    )


def validate_against_server(
    config: pb.ModelConfig, server: TritonServerSpec, has_files: bool, path: str = "spec.config"
) -> list[Finding]:
    """Checks that need the server the model runs on; `has_files`: the model's files come with it (spec.files)."""
    found = _Findings()
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
            "the model has no files and its server no spec.modelRepository (pvc or uri) to load them from: Triton would "
            "answer 'model not found in any model repository'; give them with files.configMapRef (e.g. path: 1/model.py), "
            "or put the model's folder into a repository the server names",
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
    found = _Findings()
    product = server.gpus.product
    if product is None:
        return found
    selected = server.pod.node_selector.get(GPU_PRODUCT_LABEL)
    if selected is not None and selected != product:
        found.warning(
            "spec.gpus.product",
            f"is '{product}', and spec.pod.nodeSelector sets {GPU_PRODUCT_LABEL} to '{selected}', which wins: the pods run "
            f"on {selected} while GPU memory is counted for {product}; make the two agree, or drop one",
        )
    if product not in GPU_PRODUCT_MEMORY_MIB and server.capacity.gpu_memory is None:
        found.warning(
            "spec.gpus.product",
            f"'{product}' is not a GPU whose memory the operator knows, so capacity.gpuMemory is not counted unless set: "
            f"set it (one pod's GPU memory, over its GPUs), or use a known product: {', '.join(GPU_PRODUCT_MEMORY_MIB)}",
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
    found = _Findings()
    parameter = config.parameters.get(EXECUTION_ENV_PATH)
    if parameter is None:
        return found
    where = f"{path}.parameters.{EXECUTION_ENV_PATH}.stringValue"
    value = parameter.string_value
    backend = effective_backend(config)
    if backend != PYTHON_BACKEND:
        found.warning(
            where,
            f"only the python backend runs a model in an execution environment; backend '{backend or 'unknown'}' ignores it",
        )
        return found
    prefix = MODEL_DIRECTORY_VARIABLE + "/"
    if value.startswith("/"):
        found.warning(
            where,
            f"'{value}' is read from each pod's filesystem, which the operator cannot check: it must be in the server's image "
            f"(spec.image) at that path; to ship the environment with the model, put it in the model's folder and write "
            f"'{prefix}env.tar.gz'",
        )
        return found
    if not value.startswith(prefix):
        found.error(
            where,
            f"'{value}' is not a path Triton can find (it fails the load: 'Failed to get the canonical path'): write '{prefix}{value or 'env.tar.gz'}' for a file in the model's folder",
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
            f"'{relative}' is not among the model's files ({', '.join(sorted(files)) or 'none'}): Triton would fail the load; an "
            "environment rarely fits a ConfigMap (1 MiB at most), so put the model's folder with it into the server's "
            "spec.modelRepository and drop spec.files",
        )
    return found
