"""One sample request per model, built from its config, to show the model answers."""

from __future__ import annotations

import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from ..protocol.model_config import model_config_pb2 as pb

# A variable dim (-1) gets this size in the sample.
SAMPLE_DIM = 4


def _datatype(data_type: int) -> str:
    name = pb.DataType.Name(data_type).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def sample_inputs(config: pb.ModelConfig) -> list[grpcclient.InferInput]:
    """Ones of every required input's shape (a batch of one where the model batches)."""
    inputs = []
    for tensor in config.input:
        if tensor.optional:
            continue
        shape = [SAMPLE_DIM if dim == -1 else dim for dim in tensor.dims]
        if config.max_batch_size > 0:
            shape = [1, *shape]
        datatype = _datatype(tensor.data_type)
        if datatype == "BYTES":
            data = np.full(shape, b"sample", dtype=np.object_)
        else:
            data = np.ones(shape, dtype=triton_to_np_dtype(datatype))
        infer_input = grpcclient.InferInput(tensor.name, shape, datatype)
        infer_input.set_data_from_numpy(data)
        inputs.append(infer_input)
    return inputs


async def send_sample(client: grpcclient.InferenceServerClient, config: pb.ModelConfig) -> str:
    """A one-line result: output shapes, or why it failed or was skipped."""
    if config.model_transaction_policy.decoupled:
        return "skipped: decoupled models answer on a stream"
    sequence = {"sequence_id": 1, "sequence_start": True, "sequence_end": True} if config.HasField("sequence_batching") else {}
    try:
        result = await client.infer(config.name, sample_inputs(config), client_timeout=60, **sequence)
    except InferenceServerException as error:
        return f"failed: {error.message()}"
    outputs = result.get_response().outputs
    return "ok: " + ", ".join(f"{output.name} {list(output.shape)}" for output in outputs)
