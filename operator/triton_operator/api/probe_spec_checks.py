"""A rollout probe's request against the model's config: Triton refuses a request naming an input it
lacks, of another datatype or shape, or missing a required input.

Apart from the config's own checks because it needs the probe as well as the config; the render of
a model runs it where the model has a probe.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..protocol.triton_proto import model_config_pb2 as pb
from ..protocol.triton_proto import wire_datatype
from .findings import Finding, Findings
from .rollout_spec import ProbeSpec, ProbeTensor
from .validation import WILDCARD_DIM


def _shape_fits(shape: Sequence[int], dims: Sequence[int], max_batch_size: int) -> bool:
    """A request's shape fits an input: a batch size within maxBatchSize first when the model batches,
    then each dim (-1: any size)."""
    if max_batch_size > 0:
        if not shape or not 1 <= shape[0] <= max_batch_size:
            return False
        shape = shape[1:]
    return len(shape) == len(dims) and all(dim in (WILDCARD_DIM, size) for size, dim in zip(shape, dims, strict=False))


def validate_probe(probe: ProbeSpec | None, config: pb.ModelConfig, path: str = "spec.rollout.probe") -> list[Finding]:
    """The probe's tensors against the config's: Triton refuses a request naming an input it lacks, of another
    datatype or shape, or missing a required input, so a probe that does is an error here; an expected
    output the model does not declare, or could not answer in that datatype or shape, could never match."""
    found = Findings()
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
    found: Findings,
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
                f"is {given.datatype}, {kind} '{tensor.name}' is {pb.DataType.Name(tensor.data_type)}: use "
                f"{wire_datatype(tensor.data_type)}",
            )
        if not _shape_fits(given.shape, tensor.dims, max_batch_size):
            batch = [f"1..{max_batch_size}"] if max_batch_size > 0 else []
            wanted = ", ".join([*batch, *("any" if dim == WILDCARD_DIM else str(dim) for dim in tensor.dims)])
            first = "the batch size first, as maxBatchSize > 0, then " if batch else ""
            found.error(
                f"{item}.shape",
                f"{given.shape} does not fit {kind} '{tensor.name}': it takes [{wanted}] ({first}dims "
                f"{list(tensor.dims)})",
            )
