"""Probe requests' inputs: a model's sample request built from its own data (probe_requests.py sends and judges it).

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
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from tritonclient.utils import deserialize_bytes_tensor, triton_to_np_dtype

from ..protocol.triton_proto import model_config_pb2 as pb
from ..protocol.triton_proto import wire_datatype

# A variable dim (-1) gets this size in a generated sample.
SAMPLE_DIM = 4
# Warm-up input data files sit in this folder of the model's (Triton's kWarmupDataFolder).
WARMUP_FOLDER = "warmup"
HOW_TO_GIVE_ONE = "give one with spec.rollout.probe.inputs (or the config's modelWarmup)"

# A tensor's values: numbers, booleans, or bytes objects (dtype object) for BYTES.
Array = npt.NDArray[Any]
# A model file by its path in the model's folder (e.g. warmup/input.bin), None when it has none.
FileReader = Callable[[str], bytes | None]


class GivenTensor(Protocol):
    """A tensor as the JSON inference protocol writes it (spec.rollout.probe's inputs and outputs)."""

    @property
    def name(self) -> str: ...
    @property
    def datatype(self) -> str: ...
    @property
    def shape(self) -> Sequence[int]: ...
    @property
    def data(self) -> Sequence[bool | int | float | str] | str: ...


@dataclass(frozen=True)
class SampleInput:
    name: str
    datatype: str  # as inference requests name it: FP32, BYTES, ...
    values: Array


@dataclass(frozen=True)
class SampleRequest:
    source: str  # where its inputs come from, said in the result
    inputs: tuple[SampleInput, ...]


@dataclass(frozen=True)
class NoSample:
    reason: str


class WarmupDataError(ValueError):
    """Warm-up data Triton would refuse too (the model then fails to load)."""


def tensor_values(tensor: GivenTensor) -> Array:
    """A given tensor's data as an array of its shape; one string fills a BYTES tensor."""
    data = [tensor.data] * int(np.prod(tensor.shape)) if isinstance(tensor.data, str) else tensor.data
    return _array(data, tensor.datatype, tensor.shape)


def _array(values: Sequence[object] | Array, datatype: str, shape: Sequence[int]) -> Array:
    if datatype == "BYTES":
        encoded = [
            value.encode() if isinstance(value, str) else value for value in np.asarray(values, dtype=np.object_).flat
        ]
        return np.array(encoded, dtype=np.object_).reshape(shape)
    return np.asarray(values, dtype=triton_to_np_dtype(datatype)).reshape(shape)


def given_request(tensors: Sequence[GivenTensor]) -> SampleRequest:
    """The probe's inputs as written."""
    return SampleRequest(
        "spec.rollout.probe.inputs", tuple(SampleInput(t.name, t.datatype, tensor_values(t)) for t in tensors)
    )


def _warmup_values(
    name: str, given: pb.ModelWarmup.Input, shape: list[int], read_file: FileReader, rng: np.random.Generator
) -> Array:
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
        strings: Array = deserialize_bytes_tensor(raw)
        if strings.size != count:
            raise WarmupDataError(
                f"input '{name}': {path} holds {strings.size} strings, dims {list(given.dims)} hold {count}"
            )
        return strings.reshape(shape)
    wanted = count * dtype.itemsize
    if len(raw) < wanted:
        raise WarmupDataError(
            f"input '{name}': {path} holds {len(raw)} bytes, dims {list(given.dims)} of {datatype} take {wanted}"
        )
    return np.frombuffer(raw[:wanted], dtype=dtype).reshape(shape)


def warmup_request(
    config: pb.ModelConfig, warmup: pb.ModelWarmup, read_file: FileReader, rng: np.random.Generator
) -> SampleRequest:
    """One of the requests Triton sends the model for this warm-up sample."""
    declared = {tensor.name for tensor in config.input}
    inputs = []
    for name, given in sorted(warmup.inputs.items()):
        if name not in declared:
            continue
        shape = [1, *given.dims] if config.max_batch_size > 0 else list(given.dims)
        inputs.append(
            SampleInput(name, wire_datatype(given.data_type), _warmup_values(name, given, shape, read_file, rng))
        )
    return SampleRequest(f"warm-up '{warmup.name}'", tuple(inputs))


def generated_request(config: pb.ModelConfig) -> SampleRequest | NoSample:
    """Ones of every required input's shape (a batch of one where the model batches)."""
    inputs = []
    for tensor in config.input:
        if tensor.optional:
            continue
        datatype = wire_datatype(tensor.data_type)
        if datatype == "BYTES":
            return NoSample(
                f"input '{tensor.name}' takes strings (a model name, a prompt), which "
                f"generated data cannot stand for; {HOW_TO_GIVE_ONE}"
            )
        if tensor.is_shape_tensor:
            return NoSample(
                f"input '{tensor.name}' is a shape tensor, whose values are "
                f"shapes the model must take; {HOW_TO_GIVE_ONE}"
            )
        shape = [SAMPLE_DIM if dim == -1 else dim for dim in tensor.dims]
        if config.max_batch_size > 0:
            shape = [1, *shape]
        inputs.append(SampleInput(tensor.name, datatype, np.ones(shape, dtype=triton_to_np_dtype(datatype))))
    return SampleRequest("generated ones", tuple(inputs))


def sample_request(
    config: pb.ModelConfig, given: Sequence[GivenTensor] | None, read_file: FileReader, rng: np.random.Generator
) -> SampleRequest | NoSample:
    """The sample's inputs: the given ones, else the first warm-up Triton runs, else generated ones (or none
    that mean anything)."""
    if given:
        return given_request(given)
    warmup = next((sample for sample in config.model_warmup if sample.batch_size > 0), None)
    if warmup is not None:
        return warmup_request(config, warmup, read_file, rng)
    return generated_request(config)
