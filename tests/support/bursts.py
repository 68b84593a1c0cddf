"""Bursts of concurrent requests to a model that sums each row, and Triton's counters once it has
counted them: what the batching tests judge."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import numpy as np
import tritonclient.grpc.aio as grpcaio

from triton_operator.triton.batching import ModelStatistics
from triton_operator.triton.client import ControlClient

# 32 requests of three lengths: without ragged batching, none of different lengths share a batch.
MIXED = [20, 40, 60] * 10 + [20, 40]


async def burst(url: str, model: str, lengths: Sequence[int], tensors: tuple[str, str] = ("X", "SUM")) -> None:
    """One request per length, all at once; every answer must be its row's sum."""
    async with grpcaio.InferenceServerClient(url) as client:

        async def one(length: int) -> None:
            request = grpcaio.InferInput(tensors[0], [1, length], "FP32")
            request.set_data_from_numpy(np.ones((1, length), np.float32))
            result = await client.infer(model, [request], client_timeout=60)
            assert result.as_numpy(tensors[1]).tolist() == [[float(length)]]

        await asyncio.gather(*(one(length) for length in lengths))


async def counted_statistics(client: ControlClient, model: str, requests: int, timeout: float = 30) -> ModelStatistics:
    """The model's counters once they hold `requests`: Triton counts a batch just after answering it."""
    deadline = time.monotonic() + timeout
    while (stats := (await client.statistics(model))[model]).requests < requests:
        assert time.monotonic() < deadline, f"Triton counted {stats.requests} of {requests} requests"
        await asyncio.sleep(0.01)
    return stats
