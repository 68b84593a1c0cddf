"""A decoupled model's probe on a real tritonserver: the stream is read until the request's final
response, bounded by the timeout, and the request carries the probe parameter as a unary probe does."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest
import tritonclient.grpc.aio as grpcclient

from tests.support.models import load, pod_triton, python_model
from tests.support.repository import SQUARE_SPEC_CONFIG
from triton_operator.triton.probe_inputs import SampleRequest, generated_request
from triton_operator.triton.probe_requests import ProbeAnswer, send_probe

pytestmark = pytest.mark.triton


def streaming(body: str) -> bytes:
    """model.py whose execute runs `body` for each request (`sender` its response sender, `out` one response of OUT)."""
    return (
        textwrap.dedent(
            """
        import json
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def initialize(self, args):
                self.held = []

            def execute(self, requests):
                for request in requests:
                    sender = request.get_response_sender()
                    out = pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", np.array([1], np.int32))])
                    {body}
                return None
        """
        )
        .format(body=body)
        .encode()
    )


FINAL = "flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL"
MODELS = {
    # One response, then the sender is kept and the request never ends.
    "held": streaming("sender.send(out); self.held.append(sender)"),
    # Refuses a request without the probe parameter.
    "probe_aware": streaming(
        f"sender.send(out, {FINAL}) if json.loads(request.parameters()).get('operator_probe') is True "
        f"else sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError('not a probe')), {FINAL})"
    ),
}


async def probe(url: str, name: str, timeout_seconds: float) -> ProbeAnswer:
    config = python_model(name, SQUARE_SPEC_CONFIG, MODELS[name]).parsed_config()
    request = generated_request(config)
    assert isinstance(request, SampleRequest)
    client = grpcclient.InferenceServerClient(url)
    try:
        return await send_probe(client, config, request, timeout_seconds)
    finally:
        await client.close()


def test_a_stream_probe_waits_for_the_final_response_within_its_timeout_and_carries_the_probe_parameter(
    tmp_path: Path,
) -> None:
    with pod_triton(tmp_path) as triton:
        load(triton, *(python_model(name, SQUARE_SPEC_CONFIG, code) for name, code in MODELS.items()))
        held = asyncio.run(probe(triton.grpc_url, "held", 1.0))
        aware = asyncio.run(probe(triton.grpc_url, "probe_aware", 10.0))
    assert held == ProbeAnswer("no final response within 1s (1 responses with data before it)", streamed=1)
    assert aware == ProbeAnswer(None, streamed=1)
