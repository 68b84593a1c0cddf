"""Probe requests: a model's sample request built from its own data, sent as a client would, and
judged as a client would judge the answer.

Where the inputs come from is triton/probe_inputs.py's.

An answer fails the probe where a client would fail it: an error (a python model's error response
reaches the client as one, though Triton's statistics count it a success), no answer within the
timeout, or an output that is not what the config promises (its datatype, its shape, its bytes for
that shape), or not the expected values. Local mode sends one as each model's sample; the operator's
canary sends them to canary and stable pods (k8s/rollouts/canary_prober.py).

A sequence model gets the sample as a sequence of two requests under a fresh correlation id, START set on the
first and END on the second: a model may refuse a request that starts and ends its sequence at once, or a
correlation id it saw before. Both answers are judged; the first is the probe's outputs.

A decoupled model answers on a gRPC stream only: its probe goes on a stream of one request, read until
the response that ends the request or the timeout. An error on the stream fails it; each response
with data is judged as a unary answer is. No data response at all is no failure (a decoupled model may
answer a request with nothing), said in the answer. Its outputs are not kept: how many responses a
decoupled model sends, and what each holds, may differ from one request to the next (sampled tokens),
so expected outputs and the stable pod's answer are not compared.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import _get_inference_request
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from ..protocol.triton_proto import model_config_pb2 as pb
from ..protocol.triton_proto import wire_datatype
from .probe_inputs import Array, SampleRequest

# The request parameter every probe carries, so a model that reads its requests' parameters can keep
# probes out of its own metrics. Not "triton_...": Triton's clients refuse that prefix as reserved.
PROBE_PARAMETER = "operator_probe"
# Asks Triton for an empty response flagged final after a decoupled model's last one: without it a
# stream reader cannot tell the end of a request (measured: each response then carries
# triton_final_response false, and a model's final flag sent with no response reaches no client).
EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"
FINAL_RESPONSE = "triton_final_response"
# The python backend's error when execute returns fewer (or more) responses than it got requests.
RESPONSE_COUNT = re.compile(r"InferenceRequest\(s\) size is:(\d+), and InferenceResponse\(s\) size is:(\d+)")


@dataclass(frozen=True)
class AnsweredOutput:
    """An output as the response carries it, before it is read as an array."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    raw: bytes


def _shape_promised(shape: Sequence[int], dims: Sequence[int], batch: int | None) -> bool:
    if batch is not None:
        if not shape or shape[0] != batch:
            return False
        shape = shape[1:]
    return len(shape) == len(dims) and all(dim in (-1, size) for size, dim in zip(shape, dims, strict=False))


def output_problem(config: pb.ModelConfig, outputs: Sequence[AnsweredOutput], batch: int | None) -> str | None:
    """Why the outputs are not what the config promises (each declared output, of its datatype, of its
    dims after the request's batch size where the model batches, its bytes filling that shape), or None."""
    answered = {output.name: output for output in outputs}
    if not answered and config.output:
        return (
            "the response holds no outputs (execute answered with an InferenceResponse without output_tensors); "
            f"the config promises {', '.join(repr(tensor.name) for tensor in config.output)}"
        )
    for tensor in config.output:
        output = answered.get(tensor.name)
        if output is None:
            return f"output '{tensor.name}' is missing from the answer"
        promised = wire_datatype(tensor.data_type)
        if output.datatype != promised:
            return f"output '{tensor.name}' is {output.datatype}, the config promises {promised}"
        if not _shape_promised(output.shape, tensor.dims, batch):
            dims = [batch, *tensor.dims] if batch is not None else list(tensor.dims)
            return f"output '{tensor.name}' has shape {list(output.shape)}, the config promises {dims}"
        if (
            promised != "BYTES"
            and len(output.raw) != int(np.prod(output.shape)) * np.dtype(triton_to_np_dtype(promised)).itemsize
        ):
            return (
                f"output '{tensor.name}' holds {len(output.raw)} bytes, shape "
                f"{list(output.shape)} of {promised} takes more or fewer"
            )
    return None


def difference(name: str, expected: Array, got: Array, tolerance: float) -> str | None:
    """Why `got` is not `expected` within `tolerance` (the largest absolute difference of an element;
    strings and booleans must be equal), or None."""
    if expected.shape != got.shape:
        return f"output '{name}' has shape {list(got.shape)}, {list(expected.shape)} expected"
    if expected.dtype == np.object_ or expected.dtype == np.bool_:
        return None if np.array_equal(expected, got) else f"output '{name}' differs from the one expected"
    largest = float(np.max(np.abs(expected.astype(np.float64) - got.astype(np.float64)), initial=0.0))
    return None if largest <= tolerance else f"output '{name}' differs by up to {largest:g} (tolerance {tolerance:g})"


def outputs_difference(expected: Mapping[str, Array], got: Mapping[str, Array], tolerance: float) -> str | None:
    """The first expected output `got` lacks or differs in, or None."""
    for name, values in sorted(expected.items()):
        if name not in got:
            return f"output '{name}' is missing from the answer"
        if why := difference(name, values, got[name], tolerance):
            return why
    return None


@dataclass(frozen=True)
class ProbeAnswer:
    failure: str | None  # why a client would count it failed; None: answered as promised
    outputs: dict[str, Array] = field(default_factory=dict)  # a unary answer's; none kept from a stream
    streamed: int | None = None  # a decoupled model's responses with data; None: a unary answer
    unanswered: bool = False  # a unary request got no answer: the timeout passed, or the server cut the call
    answered_before: int = 0  # the probe's requests answered before the one that failed (a sequence's START)


def _infer_inputs(request: SampleRequest) -> list[grpcclient.InferInput]:
    inputs = []
    for given in request.inputs:
        infer_input = grpcclient.InferInput(given.name, list(given.values.shape), given.datatype)
        infer_input.set_data_from_numpy(given.values)
        inputs.append(infer_input)
    return inputs


def _batch_size(config: pb.ModelConfig, request: SampleRequest) -> int | None:
    return (
        int(request.inputs[0].values.shape[0])
        if config.max_batch_size > 0 and request.inputs and request.inputs[0].values.ndim
        else None
    )


def _sequence_flags(config: pb.ModelConfig) -> list[dict[str, Any]]:
    """Each request's sequence flags: one request without, or for a sequence model its START and its END under
    a correlation id of its own (a model may remember the ids it saw)."""
    if not config.HasField("sequence_batching"):
        return [{}]
    correlation_id = secrets.randbelow(2**62) + 1
    return [
        {"sequence_id": correlation_id, "sequence_start": True, "sequence_end": False},
        {"sequence_id": correlation_id, "sequence_start": False, "sequence_end": True},
    ]


def _plain(error: str) -> str:
    """Triton's error, said plainly where it is about what execute returned."""
    if counts := RESPONSE_COUNT.search(error):
        requests, responses = counts.groups()
        return (
            f"the model's execute returned {responses} responses for {requests} request(s): it must return one "
            "InferenceResponse per request, in order (or None after sending each with request.get_response_sender())"
        )
    return error


def _answered(response: service_pb2.ModelInferResponse) -> list[AnsweredOutput]:
    return [
        AnsweredOutput(o.name, o.datatype, tuple(o.shape), bytes(raw))
        for o, raw in zip(response.outputs, response.raw_output_contents, strict=False)
    ]


async def send_probe(
    client: grpcclient.InferenceServerClient, config: pb.ModelConfig, request: SampleRequest, timeout_seconds: float
) -> ProbeAnswer:
    """One probe request (a sequence model's START and END), judged as a client would judge its answer (on a
    stream where the model is decoupled)."""
    answers: list[ProbeAnswer] = []
    for flags in _sequence_flags(config):
        if config.model_transaction_policy.decoupled:
            answer = await _send_on_stream(client, config, request, timeout_seconds, flags)
        else:
            answer = await _send_unary(client, config, request, timeout_seconds, flags)
        if answer.failure is not None:
            return dataclasses.replace(answer, answered_before=len(answers))
        answers.append(answer)
    first = answers[0]
    if first.streamed is None:
        return first
    return ProbeAnswer(None, streamed=sum(answer.streamed or 0 for answer in answers))


async def _send_unary(
    client: grpcclient.InferenceServerClient,
    config: pb.ModelConfig,
    request: SampleRequest,
    timeout_seconds: float,
    flags: dict[str, Any],
) -> ProbeAnswer:
    try:
        result = await client.infer(
            config.name,
            _infer_inputs(request),
            client_timeout=timeout_seconds,
            parameters={PROBE_PARAMETER: True},
            **flags,
        )
    except InferenceServerException as error:
        if str(error.status()) == str(grpc.StatusCode.DEADLINE_EXCEEDED):
            return ProbeAnswer(f"no answer within {timeout_seconds:g}s", unanswered=True)
        # a call the server cut (its max connection age ends every call at last) is no answer either
        unanswered = str(error.status()) == str(grpc.StatusCode.UNAVAILABLE)
        return ProbeAnswer(_plain(error.message() or str(error)), unanswered=unanswered)
    response = result.get_response()
    if why := output_problem(config, _answered(response), _batch_size(config, request)):
        return ProbeAnswer(why)
    return ProbeAnswer(None, {output.name: result.as_numpy(output.name) for output in response.outputs})


async def _send_on_stream(
    client: grpcclient.InferenceServerClient,
    config: pb.ModelConfig,
    request: SampleRequest,
    timeout_seconds: float,
    flags: dict[str, Any],
) -> ProbeAnswer:
    """One probe request on a stream of its own, read until its final response.

    The aio client's stream_infer can neither ask for the empty final response nor pass a "triton_"
    parameter, so the request is built as that client builds it and sent on the client's own stub."""
    inference = _get_inference_request(
        model_name=config.name,
        inputs=_infer_inputs(request),
        model_version="",
        request_id="",
        outputs=None,
        sequence_id=flags.get("sequence_id", 0),
        sequence_start=flags.get("sequence_start", False),
        sequence_end=flags.get("sequence_end", False),
        priority=0,
        timeout=None,
        parameters={PROBE_PARAMETER: True},
    )
    inference.parameters[EMPTY_FINAL_RESPONSE].bool_param = True
    ended = asyncio.Event()

    async def requests() -> AsyncIterator[service_pb2.ModelInferRequest]:
        yield inference
        await ended.wait()  # the request side stays open until the answer ends

    call = client._client_stub.ModelStreamInfer(requests(), timeout=timeout_seconds)
    batch, streamed = _batch_size(config, request), 0
    try:
        async for response in call:
            if response.error_message:
                return ProbeAnswer(response.error_message, streamed=streamed)
            answer = response.infer_response
            if answer.outputs:
                if why := output_problem(config, _answered(answer), batch):
                    return ProbeAnswer(why, streamed=streamed)
                streamed += 1
            if answer.parameters[FINAL_RESPONSE].bool_param:
                return ProbeAnswer(None, streamed=streamed)
        return ProbeAnswer("the stream ended before the final response", streamed=streamed)
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            return ProbeAnswer(
                f"no final response within {timeout_seconds:g}s ({streamed} responses with data before it)",
                streamed=streamed,
            )
        return ProbeAnswer(error.details() or str(error.code()), streamed=streamed)
    finally:
        ended.set()
        call.cancel()
