"""Is batching working, asked of a real tritonserver: 32 concurrent requests of a python model with
`dims: [-1]`, max batch 16 and dynamic batching, with and without allowRaggedBatch."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, ROOT
from tests.support.bursts import MIXED, burst, counted_statistics
from tests.support.local_mode import SHM, Output, local_command, processes_using
from tests.support.models import DELAY_US, SUM_CODE, load, python_model, sum_config
from tests.support.ports import free_ports
from triton_operator.api.server import TritonServerSpec
from triton_operator.cli import main
from triton_operator.local.tritonserver import LocalTriton, Ports
from triton_operator.triton.batching import BatchingSummary, ModelStatistics, StatisticsTracker, summarize
from triton_operator.triton.client import ControlClient

pytestmark = pytest.mark.triton

EQUAL = [40] * 32

MODELS = {
    "mixed": sum_config(ragged=False),
    "ragged": sum_config(ragged=True),
    "equal": sum_config(ragged=False),
    "reloaded": sum_config(ragged=False),
    "cli_mixed": sum_config(ragged=False),
    "watched": sum_config(ragged=False),
}


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTriton]:
    spec = TritonServerSpec.model_validate({"exitTimeoutSeconds": 5})
    server = LocalTriton(spec, tmp_path_factory.mktemp("triton"), Ports(*free_ports(3)))
    with server:
        load(server, *(python_model(name, config, SUM_CODE) for name, config in MODELS.items()))
        yield server
    assert server.shm_regions() == []


def counted_burst(triton: LocalTriton, model: str, lengths: Sequence[int], counted: int) -> ModelStatistics:
    """Send the burst; the counters once Triton has counted `counted` requests since the model's load."""

    async def run() -> ModelStatistics:
        await burst(triton.grpc_url, model, lengths)
        async with ControlClient(triton.grpc_url) as client:
            return await counted_statistics(client, model, counted)

    return asyncio.run(run())


def batching_over_a_burst(triton: LocalTriton, model: str, lengths: Sequence[int]) -> BatchingSummary:
    """Read the counters, send the burst, read again: the verdict on what changed."""

    async def run() -> BatchingSummary:
        tracker = StatisticsTracker()
        async with ControlClient(triton.grpc_url) as client:
            before = tracker.read(model, (await client.statistics(model))[model])
            await burst(triton.grpc_url, model, lengths)
            window = tracker.read(model, await counted_statistics(client, model, before.stats.requests + len(lengths)))
            return summarize(model, await client.model_config(model), window)

    return asyncio.run(run())


def test_mixed_lengths_without_ragged_batching_are_not_batched(triton: LocalTriton) -> None:
    summary = batching_over_a_burst(triton, "mixed", MIXED)
    assert summary.requests == 32 and summary.executions > 8, summary
    assert summary.average_batch_size < 4
    assert summary.condition()["status"] == "False" and summary.reason == "RaggedBatchNotAllowed", summary.message
    assert "allowRaggedBatch: true" in summary.message and "'X'" in summary.message


@pytest.mark.parametrize(("model", "lengths"), [("ragged", MIXED), ("equal", EQUAL)])
def test_ragged_batching_or_equal_lengths_fill_batches(triton: LocalTriton, model: str, lengths: list[int]) -> None:
    summary = batching_over_a_burst(triton, model, lengths)
    assert summary.requests == 32
    assert summary.average_batch_size > 8, summary
    assert (summary.status, summary.reason) == ("True", "BatchesFill"), summary.message


def test_a_reload_restarts_the_counters_without_negative_deltas(triton: LocalTriton) -> None:
    tracker = StatisticsTracker()
    before = tracker.read("reloaded", counted_burst(triton, "reloaded", MIXED, counted=32))
    assert before.stats.requests == 32
    load(triton, python_model("reloaded", sum_config(ragged=False, delay_us=DELAY_US // 2), SUM_CODE))
    after = tracker.read("reloaded", counted_burst(triton, "reloaded", EQUAL[:4], counted=4))
    assert after.reloaded and after.stats.requests == 4, after
    assert min(value for value in vars(after.stats).values() if isinstance(value, int)) >= 0
    assert all(count > 0 for count in after.stats.executions_by_size.values())


@pytest.mark.parametrize("scheme", ["grpc", "http"])
def test_stats_command_prints_the_verdict_and_the_reason(
    triton: LocalTriton, scheme: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if scheme == "grpc":
        counted_burst(triton, "cli_mixed", MIXED, counted=32)  # once: the http run reads the same counters
    url = triton.grpc_url if scheme == "grpc" else triton.http_url
    assert main(["stats", url, "cli_mixed"]) == 0
    out = capsys.readouterr().out
    print(out)
    assert "cli_mixed: BatchingEffective=False RaggedBatchNotAllowed:" in out
    assert "set allowRaggedBatch: true" in out
    row = next(line for line in out.splitlines() if line.startswith("cli_mixed "))
    assert row.split()[1] == "32"


def test_stats_command_refuses_an_unknown_model(triton: LocalTriton, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", triton.grpc_url, "no_such_model"]) == 2
    assert "no_such_model" in capsys.readouterr().err


def test_stats_on_triton_s_http_port_without_a_scheme_says_to_write_http(
    triton: LocalTriton, capsys: pytest.CaptureFixture[str]
) -> None:
    address = f"{triton.address}:{triton.ports.http}"
    assert main(["stats", address]) == 2
    assert capsys.readouterr().err == (
        f"triton-operator stats: {address} is Triton's HTTP port, and host:port is read over gRPC: "
        f"write http://{address}, or give Triton's gRPC port (8001 by default)\n"
    )


def test_stats_watch_shows_each_interval(triton: LocalTriton, tmp_path: Path) -> None:
    log = tmp_path / "watch.log"
    command = [
        sys.executable,
        "-m",
        "triton_operator.cli",
        "stats",
        triton.grpc_url,
        "watched",
        "--watch",
        "--interval",
        "1",
    ]
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        output = Output(log)
        at = output.wait_for("watched: BatchingEffective=Unknown NotEnoughTraffic: 0 requests")
        counted_burst(triton, "watched", MIXED, counted=32)
        output.wait_for("watched: BatchingEffective=False RaggedBatchNotAllowed", at)
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0, log.read_text()


def test_local_mode_shows_batching_and_its_verdict(tmp_path: Path) -> None:
    crs, workdir = tmp_path / "crs", tmp_path / "work"
    shutil.copytree(EXAMPLES, crs)
    log = tmp_path / "local.log"
    with log.open("w") as out:
        process = subprocess.Popen(local_command([crs], workdir), stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    grpc_url = f"127.0.0.1:{process.args[process.args.index('--grpc-port') + 1]}"
    tensors = ("input_field", "sum")
    output = Output(log)
    try:
        at = output.wait_for("watching the files")
        asyncio.run(burst(grpc_url, "python_batched_service", MIXED, tensors))  # the example allows ragged batches
        at = output.wait_for("python_batched_service: BatchingEffective=True BatchesFill", at)
        table = log.read_text()[:at].rsplit("MODEL", 1)[1]
        assert "16.0/16 q " in next(line for line in table.splitlines() if line.startswith("python_batched_service "))

        ragged = crs / "ragged.yaml"
        ragged.write_text(ragged.read_text().replace(", allowRaggedBatch: true", ""))
        at = output.wait_for("reload python_batched_service: done", at)
        asyncio.run(burst(grpc_url, "python_batched_service", MIXED, tensors))
        output.wait_for("python_batched_service: BatchingEffective=False RaggedBatchNotAllowed", at)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()
    # Other tests on this machine run tritonservers too: look only for what this one started.
    assert processes_using(workdir) == [] and list(SHM.glob(f"triton_operator_{process.pid}_*")) == []
