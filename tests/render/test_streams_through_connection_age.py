"""A stream outlives the gRPC connection age: a real tritonserver started with the flags rendered
for a default TritonServer carries a decoupled model's one-response-a-second stream to its end,
though its connection gets a GOAWAY several times meanwhile. Then a grace shorter than the stream,
to show the measurement sees the cut.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from tests.support.models import TICKER_CODE, TICKER_CONFIG, load, python_model
from tests.support.ports import free_ports
from tests.support.serving import Streamed, stream_ticks
from triton_operator.api.server import TritonServerSpec
from triton_operator.local.tritonserver import LocalTriton, Ports
from triton_operator.render.args import server_args

pytestmark = pytest.mark.triton

MODEL = "ticker"


@contextmanager
def serving(spec: TritonServerSpec, workdir: Path) -> Iterator[LocalTriton]:
    """Our tritonserver, run with the flags rendered for `spec`, the ticker loaded."""
    with LocalTriton(spec, workdir, Ports(*free_ports(3))) as triton:
        load(triton, python_model(MODEL, TICKER_CONFIG, TICKER_CODE))
        yield triton


def streamed(triton: LocalTriton, ticks: int, period_ms: int) -> Streamed:
    """One stream on a fresh channel."""
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    try:
        return stream_ticks(client, MODEL, ticks, period_ms)
    finally:
        client.close()


def age_flags(spec: TritonServerSpec) -> list[str]:
    return [flag for flag in server_args(spec, control_key=None) if flag.startswith("--grpc-max-connection-age")]


def test_a_stream_longer_than_several_connection_ages_arrives_whole(tmp_path: Path) -> None:
    """The flags of a default TritonServer: the stream's connection gets its GOAWAY about every
    max age, and the stream goes on to its end."""
    spec = TritonServerSpec()
    seconds = 60
    assert spec.grpc.max_connection_age_ms * 3 < seconds * 1000, age_flags(spec)  # several ages, or it proves nothing
    with serving(spec, tmp_path) as triton:
        result = streamed(triton, seconds, 1000)
    print(
        f"{age_flags(spec)}: {len(result.ticks)} of {seconds} ticks, errors {result.errors}, in {result.seconds:.1f}s"
    )
    assert result.errors == [] and result.ticks == list(range(seconds)), (
        age_flags(spec),
        result.errors,
        len(result.ticks),
    )


def test_a_grace_shorter_than_the_stream_cuts_it(tmp_path: Path) -> None:
    """What the default grace avoids: the connection closes at its (jittered) age plus the grace, and
    the stream with it."""
    spec = TritonServerSpec.model_validate(
        {"grpc": {"maxConnectionAgeMs": 2000, "maxConnectionAgeGraceMs": 1000}, "drain": {"maxRequestSeconds": 1}}
    )
    seconds = 10
    with serving(spec, tmp_path) as triton:
        result = streamed(triton, seconds, 1000)
    print(
        f"{age_flags(spec)}: {len(result.ticks)} of {seconds} ticks, errors {result.errors}, in {result.seconds:.1f}s"
    )
    assert len(result.ticks) < seconds and len(result.errors) == 1 and "UNAVAILABLE" in result.errors[0], result
    assert result.seconds < 2 * 1.1 + 1 + 2, result.seconds  # 2 s to spare on a busy machine
