"""A stand-in for a Triton pod's control API that records when each call arrives.

It runs nothing: a load keeps the model's config, and the reads the operator's sync makes (index,
statistics, a model's config, live) are answered from those configs, every loaded model ready at
version 1. So a pod can hold hundreds of models at no cost, and what is measured up to a call's
arrival is the operator's own path, not a load's work.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc


@dataclass(frozen=True)
class Call:
    arrived: float  # time.perf_counter() at its arrival (the same clock in every process of this machine)
    method: str
    model: str = ""


class ControlRecorder(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Serve with `async with ControlRecorder() as recorder`; `recorder.port` is its gRPC port."""

    def __init__(self) -> None:
        self.configs: dict[str, model_config_pb2.ModelConfig] = {}
        self.calls: list[Call] = []
        self.arrival = asyncio.Condition()
        self.port = 0
        self._server: grpc.aio.Server | None = None

    async def __aenter__(self) -> ControlRecorder:
        self._server = grpc.aio.server()
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        await self._server.stop(grace=None)

    async def _record(self, method: str, model: str = "") -> None:
        self.calls.append(Call(time.perf_counter(), method, model))
        async with self.arrival:
            self.arrival.notify_all()

    async def first_call(
        self, after: float, method: str | None = None, model: str | None = None, timeout: float = 60
    ) -> Call:
        """The first call that arrived after `after` (of this method, for this model), waited for."""

        def found() -> Call | None:
            return next(
                (
                    c
                    for c in self.calls
                    if c.arrived > after and method in (None, c.method) and model in (None, c.model)
                ),
                None,
            )

        async with self.arrival:
            await asyncio.wait_for(self.arrival.wait_for(found), timeout)
        call = found()
        assert call is not None
        return call

    async def ServerLive(self, request: Any, context: Any) -> service_pb2.ServerLiveResponse:
        await self._record("live")
        return service_pb2.ServerLiveResponse(live=True)

    async def RepositoryIndex(self, request: Any, context: Any) -> service_pb2.RepositoryIndexResponse:
        await self._record("index")
        entries = [
            service_pb2.RepositoryIndexResponse.ModelIndex(name=name, version="1", state="READY")
            for name in sorted(self.configs)
        ]
        return service_pb2.RepositoryIndexResponse(models=entries)

    async def ModelStatistics(self, request: Any, context: Any) -> service_pb2.ModelStatisticsResponse:
        await self._record("statistics", request.name)
        names = [request.name] if request.name else sorted(self.configs)
        return service_pb2.ModelStatisticsResponse(
            model_stats=[service_pb2.ModelStatistics(name=name, version="1") for name in names if name in self.configs]
        )

    async def ModelConfig(self, request: Any, context: Any) -> service_pb2.ModelConfigResponse:
        await self._record("config", request.name)
        if request.name not in self.configs:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"Request for unknown model: '{request.name}' is not found")
        return service_pb2.ModelConfigResponse(config=self.configs[request.name])

    async def RepositoryModelLoad(self, request: Any, context: Any) -> service_pb2.RepositoryModelLoadResponse:
        await self._record("load", request.model_name)
        self.configs[request.model_name] = json_format.Parse(
            request.parameters["config"].string_param, model_config_pb2.ModelConfig()
        )
        return service_pb2.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: Any, context: Any) -> service_pb2.RepositoryModelUnloadResponse:
        await self._record("unload", request.model_name)
        self.configs.pop(request.model_name, None)
        return service_pb2.RepositoryModelUnloadResponse()
