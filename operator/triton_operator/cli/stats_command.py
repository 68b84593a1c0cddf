"""`triton-operator stats URL [MODEL]`: is batching working on a Triton that already runs?

Reads Triton's statistics and each model's config over gRPC (`host:port`, `grpc://host:port`) or
HTTP (`http://host:port`), and prints per model the executed batch sizes, the queue and compute
time and the BatchingEffective verdict: once over the counters since each model's load, or with
`--watch` over what changed in each interval. A server the operator runs answers statistics and
model configs only to its control key (`--key`, or TRITON_OPERATOR_CONTROL_KEY).
"""

from __future__ import annotations

import asyncio
import datetime
import sys
import urllib.request
from collections.abc import Awaitable
from typing import Any, Protocol, TextIO
from urllib.parse import urlsplit

import aiohttp
import tritonclient.http.aio as httpclient
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2
from tritonclient.utils import InferenceServerException

from ..protocol.names import CONTROL_HEADER
from ..triton.batching import BatchingSummary, ModelStatistics, StatisticsTracker, statistics_from_proto, summarize
from ..triton.client import ControlClient, ControlError


class StatisticsSource(Protocol):
    async def statistics(self, name: str = "") -> dict[str, ModelStatistics]: ...

    async def model_config(self, name: str) -> model_config_pb2.ModelConfig: ...

    async def close(self) -> None: ...


class HttpSource:
    """Triton over HTTP: the same statistics and config, as JSON in protobuf's mapping."""

    def __init__(self, url: str, key: str | None = None):
        parts = urlsplit(url)
        self._client = httpclient.InferenceServerClient(parts.netloc, ssl=parts.scheme == "https")
        self._headers = {CONTROL_HEADER: key} if key else None

    async def _get(self, call: Awaitable[dict[str, Any]]) -> dict[str, Any]:
        try:
            return await call
        except InferenceServerException as error:
            raise ControlError(error.message() or str(error)) from None
        except (aiohttp.ClientError, OSError) as error:
            raise ControlError(str(error)) from None

    async def statistics(self, name: str = "") -> dict[str, ModelStatistics]:
        document = await self._get(self._client.get_inference_statistics(name, headers=self._headers))
        return statistics_from_proto(
            json_format.ParseDict(document, service_pb2.ModelStatisticsResponse(), ignore_unknown_fields=True)
        )

    async def model_config(self, name: str) -> model_config_pb2.ModelConfig:
        document = await self._get(self._client.get_model_config(name, headers=self._headers))
        return json_format.ParseDict(document, model_config_pb2.ModelConfig(), ignore_unknown_fields=True)

    async def close(self) -> None:
        await self._client.close()


def answers_http(address: str) -> bool:
    """Whether a Triton answers HTTP at host:port: the port a gRPC read failed on may be its HTTP port."""
    try:
        with urllib.request.urlopen(f"http://{address}/v2/health/live", timeout=2) as response:
            status: int = response.status
            return status == 200
    except OSError:
        return False


def unread(url: str, error: ControlError) -> str:
    """Why Triton could not be read at `url`, with what to give instead when nothing answered gRPC there."""
    if error.key_refused:
        return f"{url} answers statistics only to the server's control key ({error.message}): give it with --key"
    if url.startswith(("http://", "https://", "grpc://")) or error.status != "UNAVAILABLE":
        return f"{url}: {error.message}"
    if answers_http(url):
        return (
            f"{url} is Triton's HTTP port, and host:port is read over gRPC: write "
            f"http://{url}, or give Triton's gRPC port (8001 by default)"
        )
    return (
        f"{url}: no Triton answers gRPC there ({error.message}): give Triton's gRPC port "
        "(8001 by default), or http://host:port for its HTTP port"
    )


def open_source(url: str, key: str | None = None) -> StatisticsSource:
    if url.startswith(("http://", "https://")):
        return HttpSource(url, key)
    return ControlClient(url.removeprefix("grpc://"), key)


async def read_summaries(
    source: StatisticsSource, tracker: StatisticsTracker, model: str = ""
) -> list[BatchingSummary]:
    """Each model's batching since the tracker's last read (since its load on the first)."""
    counters = await source.statistics(model)
    tracker.retain(counters)
    return [
        summarize(name, await source.model_config(name), tracker.read(name, current))
        for name, current in sorted(counters.items())
    ]


def summary_lines(summaries: list[BatchingSummary]) -> list[str]:
    """A table of the numbers, then each model's verdict."""
    rows = [
        (
            "MODEL",
            "REQUESTS",
            "EXECUTIONS",
            "AVG/MAX BATCH",
            "BATCH SIZES (size x executions)",
            "QUEUE/REQ",
            "COMPUTE/EXEC",
        )
    ]
    for s in summaries:
        rows.append(
            (
                s.model,
                str(s.requests),
                str(s.executions),
                f"{s.average_batch_size:.1f}/{s.max_batch_size}" if s.max_batch_size else "-",  # does not batch
                s.histogram(),
                f"{s.queue_ms_per_request:.2f}ms",
                f"{s.compute_ms_per_execution:.2f}ms",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip() for row in rows]
    return lines + [f"{s.model}: {s.describe()}" for s in summaries]


async def run_stats(
    url: str,
    model: str = "",
    watch: bool = False,
    interval_seconds: float = 10.0,
    out: TextIO | None = None,
    key: str | None = None,
) -> int:
    out = out or sys.stdout
    source = open_source(url, key)
    tracker = StatisticsTracker()
    try:
        summaries = await read_summaries(source, tracker, model)
        print(f"since each model's load ({url}):", file=out)
        print("\n".join(summary_lines(summaries)), file=out, flush=True)
        while watch:
            await asyncio.sleep(interval_seconds)
            summaries = await read_summaries(source, tracker, model)
            now = datetime.datetime.now().strftime("%H:%M:%S")
            print(f"\n{now}, the last {interval_seconds:g}s:", file=out)
            print("\n".join(summary_lines(summaries)), file=out, flush=True)
    finally:
        await source.close()
    return 0
