"""One sample request per model, to show the model answers, with inputs from the model's own data where it has some.

Where the inputs come from, the first that the model has:
1. `spec.rollout.probe.inputs`: the request its author wrote for it.
2. The config's `modelWarmup`: its first sample that Triton runs (Triton skips batchSize 0), built as Triton
   builds it (measured, docs/triton-facts.md). Triton sends batchSize requests of a batch of one each (no
   batch dimension when maxBatchSize is 0); the sample is one of them. zeroData is zero bytes (empty strings for
   TYPE_STRING), randomData random bytes read as the data type (for TYPE_STRING the same empty strings),
   inputDataFile the file `warmup/<file>` of the model's folder: its first bytes for the dims, or for
   TYPE_STRING the whole file, serialized as Triton's strings are (a 4-byte length before each). Warm-up
   inputs that are no input of the config (sequence controls) are left to the request's sequence flags.
3. Generated: ones of every required input's shape, a variable dim (-1) of SAMPLE_DIM, a batch of one.
   Ones stand for no string (a model name, a prompt) and for no shape tensor (its values are shapes the
   model must take): for those the model has no meaningful sample, which is no failure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException, deserialize_bytes_tensor, triton_to_np_dtype

from ..api.rollout import ProbeSpec
from ..protocol.model_config import model_config_pb2 as pb
from ..protocol.model_config import wire_datatype
from ..render.fleet import RenderedModel

# A variable dim (-1) gets this size in a generated sample.
SAMPLE_DIM = 4
# Warm-up input data files sit in this folder of the model's (Triton's kWarmupDataFolder).
WARMUP_FOLDER = "warmup"
HOW_TO_GIVE_ONE = "give one with spec.rollout.probe.inputs (or the config's modelWarmup)"

# A model file by its path in the model's folder (e.g. warmup/input.bin), None when it has none.
FileReader = Callable[[str], bytes | None]


@dataclass(frozen=True)
class SampleInput:
    name: str
    datatype: str  # as inference requests name it: FP32, BYTES, ...
    values: np.ndarray


@dataclass(frozen=True)
class SampleRequest:
    source: str  # where its inputs come from, said in the result
    inputs: tuple[SampleInput, ...]


@dataclass(frozen=True)
class NoSample:
    reason: str


class WarmupDataError(ValueError):
    """Warm-up data Triton would refuse too (the model then fails to load)."""


def _array(values: Sequence[object] | np.ndarray, datatype: str, shape: Sequence[int]) -> np.ndarray:
    if datatype == "BYTES":
        encoded = [value.encode() if isinstance(value, str) else value for value in np.asarray(values, dtype=np.object_).flat]
        return np.array(encoded, dtype=np.object_).reshape(shape)
    return np.asarray(values, dtype=triton_to_np_dtype(datatype)).reshape(shape)


def probe_request(probe: ProbeSpec) -> SampleRequest:
    """The probe's inputs as written; one string fills a BYTES tensor."""
    inputs = []
    for tensor in probe.inputs:
        count = int(np.prod(tensor.shape))
        data = [tensor.data] * count if isinstance(tensor.data, str) else tensor.data
        inputs.append(SampleInput(tensor.name, tensor.datatype, _array(data, tensor.datatype, tensor.shape)))
    return SampleRequest("spec.rollout.probe.inputs", tuple(inputs))


def _warmup_values(name: str, given: pb.ModelWarmup.Input, shape: list[int], read_file: FileReader, rng: np.random.Generator) -> np.ndarray:
    datatype = wire_datatype(given.data_type)
    count = int(np.prod(shape))
    kind = given.WhichOneof("input_data_type")
    if datatype == "BYTES" and kind != "input_data_file":
        return np.full(shape, b"", dtype=np.object_)  # zero lengths: random data for strings is zero data too
    if kind == "zero_data":
        return np.zeros(shape, dtype=triton_to_np_dtype(datatype))
    dtype = np.dtype(triton_to_np_dtype(datatype))
    if kind == "random_data":
        return np.frombuffer(rng.bytes(count * dtype.itemsize), dtype=dtype).reshape(shape)
    path = f"{WARMUP_FOLDER}/{given.input_data_file}"
    raw = read_file(path)
    if raw is None:
        raise WarmupDataError(f"input '{name}' reads {path}, which is not among the model's files")
    if datatype == "BYTES":
        strings = deserialize_bytes_tensor(raw)
        if strings.size != count:
            raise WarmupDataError(f"input '{name}': {path} holds {strings.size} strings, dims {list(given.dims)} hold {count}")
        return strings.reshape(shape)
    wanted = count * dtype.itemsize
    if len(raw) < wanted:
        raise WarmupDataError(f"input '{name}': {path} holds {len(raw)} bytes, dims {list(given.dims)} of {datatype} take {wanted}")
    return np.frombuffer(raw[:wanted], dtype=dtype).reshape(shape)


def warmup_request(config: pb.ModelConfig, warmup: pb.ModelWarmup, read_file: FileReader, rng: np.random.Generator) -> SampleRequest:
    """One of the requests Triton sends the model for this warm-up sample."""
    declared = {tensor.name for tensor in config.input}
    inputs = []
    for name, given in sorted(warmup.inputs.items()):
        if name not in declared:
            continue
        shape = [1, *given.dims] if config.max_batch_size > 0 else list(given.dims)
        inputs.append(SampleInput(name, wire_datatype(given.data_type), _warmup_values(name, given, shape, read_file, rng)))
    return SampleRequest(f"warm-up '{warmup.name}'", tuple(inputs))


def generated_request(config: pb.ModelConfig) -> SampleRequest | NoSample:
    """Ones of every required input's shape (a batch of one where the model batches)."""
    inputs = []
    for tensor in config.input:
        if tensor.optional:
            continue
        datatype = wire_datatype(tensor.data_type)
        if datatype == "BYTES":
            return NoSample(f"input '{tensor.name}' takes strings (a model name, a prompt), which generated data cannot stand for; {HOW_TO_GIVE_ONE}")
        if tensor.is_shape_tensor:
            return NoSample(f"input '{tensor.name}' is a shape tensor, whose values are shapes the model must take; {HOW_TO_GIVE_ONE}")
        shape = [SAMPLE_DIM if dim == -1 else dim for dim in tensor.dims]
        if config.max_batch_size > 0:
            shape = [1, *shape]
        inputs.append(SampleInput(tensor.name, datatype, np.ones(shape, dtype=triton_to_np_dtype(datatype))))
    return SampleRequest("generated ones", tuple(inputs))


def sample_request(config: pb.ModelConfig, probe: ProbeSpec | None, read_file: FileReader, rng: np.random.Generator) -> SampleRequest | NoSample:
    """The sample's inputs: the probe's, else the first warm-up Triton runs, else generated ones (or none that mean anything)."""
    if probe is not None:
        return probe_request(probe)
    warmup = next((sample for sample in config.model_warmup if sample.batch_size > 0), None)
    if warmup is not None:
        return warmup_request(config, warmup, read_file, rng)
    return generated_request(config)


def model_file_reader(model: RenderedModel, model_dir: Path) -> FileReader:
    """The model's files as Triton sees them: those sent with the load (spec.files), else its folder in the repository."""
    if model.model.spec.files is not None:
        return model.files.get

    def read(path: str) -> bytes | None:
        file = model_dir / path
        return file.read_bytes() if file.is_file() else None

    return read


def _infer_inputs(request: SampleRequest) -> list[grpcclient.InferInput]:
    inputs = []
    for given in request.inputs:
        infer_input = grpcclient.InferInput(given.name, list(given.values.shape), given.datatype)
        infer_input.set_data_from_numpy(given.values)
        inputs.append(infer_input)
    return inputs


async def send_sample(client: grpcclient.InferenceServerClient, model: RenderedModel, model_dir: Path) -> str:
    """A one-line result: output shapes and where the inputs came from, why it failed, or why none was sent.
    Only a line starting with "failed" is a failure."""
    config = model.config
    if config.model_transaction_policy.decoupled:
        return "skipped: decoupled models answer on a stream"
    probe = model.model.spec.rollout.probe if model.model.spec.rollout else None
    try:
        request = sample_request(config, probe, model_file_reader(model, model_dir), np.random.default_rng())
    except WarmupDataError as error:
        return f"failed: the warm-up data: {error}"
    if isinstance(request, NoSample):
        return f"no meaningful sample: {request.reason}"
    sequence = {"sequence_id": 1, "sequence_start": True, "sequence_end": True} if config.HasField("sequence_batching") else {}
    try:
        result = await client.infer(config.name, _infer_inputs(request), client_timeout=60, **sequence)
    except InferenceServerException as error:
        return f"failed: {error.message()} (inputs from {request.source})"
    outputs = result.get_response().outputs
    return "ok: " + ", ".join(f"{output.name} {list(output.shape)}" for output in outputs) + f" (inputs from {request.source})"
