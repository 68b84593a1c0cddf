"""One sample request per model, to show the model answers, with inputs from the model's own data where it
has some: spec.rollout.probe.inputs, else its warm-up, else generated ones (triton/probe_requests.py builds and
judges it, as the operator's canary does; a decoupled model's on a gRPC stream)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tritonclient.grpc.aio as grpcclient

from ..render.model_rendering import RenderedModel
from ..triton.client import ControlClient, ControlError, ModelState
from ..triton.probe_inputs import FileReader, NoSample, WarmupDataError, sample_request
from ..triton.probe_requests import send_probe
from ..triton.sync import ReplicaReport
from .local_state import LocalState, Printer
from .tritonserver import LocalTriton
from .versions import with_hint

# How long the sample may take to answer.
SAMPLE_TIMEOUT_SECONDS = 60
SILENT = (
    "the model's execute returned no response for the request (Triton counted it done, and no answer came): "
    "return one InferenceResponse per request, or send it with request.get_response_sender()"
)


def model_file_reader(model: RenderedModel, model_dir: Path) -> FileReader:
    """The model's files as Triton sees them: those sent with the load (spec.files), else its folder in the
    repository."""
    if model.model.spec.files is not None:
        return model.files.get

    def read(path: str) -> bytes | None:
        file = model_dir / path
        return file.read_bytes() if file.is_file() else None

    return read


async def _requests_done(control: ControlClient, name: str) -> int | None:
    """How many requests Triton counts the model to have answered (None when it does not say)."""
    try:
        statistics = await control.statistics(name)
    except ControlError:
        return None
    return statistics[name].requests if name in statistics else None


async def send_sample(
    client: grpcclient.InferenceServerClient, control: ControlClient, model: RenderedModel, model_dir: Path
) -> str:
    """A one-line result: output shapes and where the inputs came from, why it failed, or why none was sent.
    Only a line starting with "failed" is a failure. A request left unanswered though Triton counts it done
    was never answered by the model's execute: that is said instead of the timeout or the cut call."""
    config = model.desired.parsed_config()
    probe = model.model.spec.rollout.probe if model.model.spec.rollout else None
    try:
        request = sample_request(
            config, probe.inputs if probe else None, model_file_reader(model, model_dir), np.random.default_rng()
        )
    except WarmupDataError as error:
        return f"failed: the warm-up data: {error}"
    if isinstance(request, NoSample):
        return f"no meaningful sample: {request.reason}"
    before = await _requests_done(control, config.name)
    answer = await send_probe(client, config, request, SAMPLE_TIMEOUT_SECONDS)
    if answer.unanswered and before is not None:
        done = await _requests_done(control, config.name)
        if done is not None and done - before > answer.answered_before:
            return f"failed: {SILENT} (inputs from {request.source})"
    if answer.failure is not None:
        return f"failed: {answer.failure} (inputs from {request.source})"
    if answer.streamed is not None:
        return (
            f"ok: {answer.streamed} responses with data on the stream, then "
            f"the final one (inputs from {request.source})"
        )
    return (
        "ok: "
        + ", ".join(f"{name} {list(values.shape)}" for name, values in answer.outputs.items())
        + f" (inputs from {request.source})"
    )


async def send_samples(
    triton: LocalTriton, control: ControlClient, state: LocalState, report: ReplicaReport, printer: Printer
) -> bool:
    """A sample request to each declared model, its result a line of its own; whether every one was answered."""
    ok = True
    async with grpcclient.InferenceServerClient(triton.grpc_url) as client:
        for model in sorted(state.models.values(), key=lambda m: m.name):
            name = model.name
            if not report.states.get(name, ModelState(name, False)).ready:
                printer.line(f"sample {name}: not ready")
                ok = False
                continue
            result = await send_sample(client, control, model, triton.model_repository / name)
            ok = ok and not result.startswith("failed")
            printer.line(f"sample {name}: {with_hint(result, triton.version, triton.spec.image)}")
    return ok
