"""Triton's model-repository (control) API over gRPC, for one replica.

gRPC, not HTTP: the HTTP load call holds a client request for a whole reload where the same reload
over gRPC holds clients for no time worth counting (measured, docs/triton-facts.md, "Loading and
reloading"). The client sends the operator's key (the control, statistics and model-config APIs all
need it), bounds every call with a timeout, retries what is transient, and keeps Triton's own error
text, which is what status shows users.

A load can outlive its call: servers run with a gRPC max connection age (for client draining), and
gRPC cuts every call older than the age and its grace with UNAVAILABLE, while Triton goes on
loading. Sending the load again would only queue another load behind it, so after a cut the
client follows the model's state until it is ready at the revision sent, Triton reports the load
failed, or the load's timeout passes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException

from ..protocol.desired import DesiredModel
from ..protocol.names import GRPC_CONTROL_METADATA, REVISION_PARAMETER
from ..protocol.triton_proto import model_config_pb2
from .batching import ModelStatistics, statistics_from_proto
from .load_answers import (
    LoadProgress,
    LoadSeen,
    ensemble_poll_failure,
    load_progress,
    runs_as_sent,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Failures worth another try: the server is starting, restarting or briefly overloaded.
TRANSIENT = {grpc.StatusCode.UNAVAILABLE.name, grpc.StatusCode.RESOURCE_EXHAUSTED.name}
READ_TRANSIENT = TRANSIENT | {grpc.StatusCode.DEADLINE_EXCEEDED.name}
# How Triton refuses a wrong or missing key on a restricted API over gRPC (docs/triton-facts.md).
KEY_REFUSED = (grpc.StatusCode.UNAVAILABLE.name, "This protocol is restricted")
# gRPC's words when it made no connection (a pod starting): the server never got the call.
NOT_CONNECTED = "failed to connect to all addresses"
# Triton's words for a model it holds nothing of: asked before any load of it, not while loading it.
UNKNOWN_MODEL = "is not found"


def channel_options() -> list[tuple[str, int]]:
    """tritonclient's own channel options (message sizes, keepalive), and a reconnect backoff of 0.1 s for
    gRPC's 1 s: a new pod's tritonserver answers a moment after it starts, and gRPC, refused once before
    that, waited a second before it tried again (docs/triton-facts.md, "Readiness, shutdown, flags")."""
    keepalive = grpcclient.KeepAliveOptions()
    return [
        ("grpc.max_send_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 2000),
    ]


class ControlError(Exception):
    """A control call that failed; `message` is Triton's own text."""

    def __init__(self, message: str, status: str = "", transient: bool = False):
        super().__init__(message)
        self.message = message
        self.status = status
        self.transient = transient

    @property
    def key_refused(self) -> bool:
        """Triton refused the control key: it was started with another one."""
        status, text = KEY_REFUSED
        return self.status == status and text in self.message

    @property
    def cut(self) -> bool:
        """The call reached the server and was cut in flight (a connection's max age and grace passed):
        what it asked for may still be going on there."""
        return (
            self.status == grpc.StatusCode.UNAVAILABLE.name
            and NOT_CONNECTED not in self.message
            and not self.key_refused
        )


def load_timed_out(name: str, timeout_seconds: float) -> ControlError:
    return ControlError(
        f"load of {name} did not finish within {timeout_seconds:g} s (spec.loadTimeoutSeconds, or the operator's "
        "load timeout where unset): raise spec.loadTimeoutSeconds if the model takes longer to load; otherwise the "
        "server's log says why it did not load",
        grpc.StatusCode.DEADLINE_EXCEEDED.name,
    )


@dataclass(frozen=True)
class ModelState:
    """What one replica says about one model."""

    name: str
    ready: bool
    revision: str = ""
    version: str = ""
    reason: str = ""
    composing: tuple[str, ...] = ()  # the models an ensemble's steps run


@dataclass(frozen=True)
class Timeouts:
    read_seconds: float = 10.0
    load_seconds: float = 600.0


def _status_name(error: InferenceServerException) -> str:
    return str(error.status() or "").removeprefix("StatusCode.")


def _revision(config: model_config_pb2.ModelConfig) -> str:
    """The revision a config Triton runs carries ("" for a model loaded without one)."""
    parameter = config.parameters.get(REVISION_PARAMETER)
    return parameter.string_value if parameter else ""


class ControlClient:
    """One replica's control API. Use as `async with ControlClient(url, key) as client`."""

    def __init__(
        self,
        url: str,
        control_key: str | None = None,
        timeouts: Timeouts = Timeouts(),
        retries: int = 3,
        backoff_seconds: float = 0.2,
        parallel_reads: int = 16,
        follow_seconds: float = 1.0,
    ):
        self.url = url
        self._headers = {GRPC_CONTROL_METADATA: control_key} if control_key else None
        self._timeouts = timeouts
        self._retries = retries
        self._backoff = backoff_seconds
        self._parallel_reads = parallel_reads
        self._follow_seconds = follow_seconds  # between looks at a load whose call was cut
        self._client = grpcclient.InferenceServerClient(url, channel_args=channel_options())

    async def __aenter__(self) -> ControlClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._client.close()

    async def _call(
        self,
        what: str,
        call: Callable[[], Awaitable[T]],
        transient: set[str],
        retried: Callable[[ControlError], bool] = lambda _: True,
    ) -> T:
        """Run a call, retrying transient failures that `retried` accepts with exponential backoff."""
        for attempt in range(self._retries + 1):
            try:
                return await call()
            except InferenceServerException as error:
                status = _status_name(error)
                failure = ControlError(error.message() or str(error), status, transient=status in transient)
                # a refused key reads UNAVAILABLE too, but no retry changes the key a server was started with
                if not failure.transient or failure.key_refused or not retried(failure) or attempt == self._retries:
                    raise failure from None
                delay = self._backoff * 2**attempt
                logger.debug("%s on %s failed (%s), retrying in %.1fs", what, self.url, status, delay)
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def live(self) -> bool:
        try:
            return await self._call(
                "live", lambda: self._client.is_server_live(client_timeout=self._timeouts.read_seconds), set()
            )
        except ControlError:
            return False

    async def model_states(
        self, names: Iterable[str], known: Mapping[str, ModelState] | None = None
    ) -> dict[str, ModelState]:
        """State of the named models and of every model in the repository index.

        Which models are ready, and their versions, come from one statistics call: Triton lists every
        ready version there (measured), also of models loaded with file overrides, which the index
        lacks. Then each ready model's config (its revision, an ensemble's steps), up to
        `parallel_reads` at once: three calls a model, one model after another, had made reading a
        replica of 100 models cost a sync most of its time. A model in `known` (what the caller read
        before) that is still ready at that version is that state, its config not read again.
        """
        known = known or {}
        index, statistics = await asyncio.gather(
            self._index(),
            self._call(
                "statistics",
                lambda: self._client.get_inference_statistics(
                    "", headers=self._headers, client_timeout=self._timeouts.read_seconds
                ),
                READ_TRANSIENT,
            ),
        )
        states = {
            entry.name: ModelState(entry.name, ready=entry.state == "READY", version=entry.version, reason=entry.reason)
            for entry in index.models
        }
        ready_versions: dict[str, list[str]] = {}
        for stats in statistics.model_stats:
            ready_versions.setdefault(stats.name, []).append(stats.version)
        limit = asyncio.Semaphore(self._parallel_reads)

        async def read(name: str) -> ModelState:
            if name not in ready_versions:
                return states.get(name) or ModelState(name, ready=False)
            version = max(ready_versions[name], key=lambda v: int(v) if v.isdigit() else -1)
            if name in known and known[name].ready and known[name].version == version:
                return known[name]
            async with limit:
                config = await self.model_config(name)
            steps = {step.model_name for step in config.ensemble_scheduling.step}
            return ModelState(
                name, ready=True, revision=_revision(config), version=version, composing=tuple(sorted(steps))
            )

        names = sorted(set(names) | set(states))
        return dict(zip(names, await asyncio.gather(*(read(name) for name in names)), strict=False))

    async def _index(self) -> Any:
        """Triton's repository index: the models its repository holds, and every model it loaded from there."""
        return await self._call(
            "index",
            lambda: self._client.get_model_repository_index(
                headers=self._headers, client_timeout=self._timeouts.read_seconds
            ),
            READ_TRANSIENT,
        )

    async def load(self, model: DesiredModel) -> None:
        """Load or reload in place: the old version serves until the new one is ready. Done within the
        model's load timeout (default: the client's), a call cut on the way included."""
        name, config_json, files, revision = model.name, model.config_json, model.files, model.revision
        timeout = model.load_timeout_seconds or self._timeouts.load_seconds
        deadline = asyncio.get_running_loop().time() + timeout
        overrides = {f"file:{path}": content for path, content in files.items()} or None
        sent = model.parsed_config()  # what a failed answer is judged by

        def remaining() -> float:
            return deadline - asyncio.get_running_loop().time()

        while remaining() > 0:
            try:
                await self._call(
                    f"load {name}",
                    lambda: self._client.load_model(
                        name, headers=self._headers, config=config_json, files=overrides, client_timeout=remaining()
                    ),
                    TRANSIENT,
                    retried=lambda failure: not failure.cut,
                )
                return
            except ControlError as failure:
                if failure.status == grpc.StatusCode.DEADLINE_EXCEEDED.name:
                    raise load_timed_out(name, timeout) from None
                if ensemble_poll_failure(failure.message, sent) and await self._runs_as_sent(name, sent):
                    return
                if not failure.cut:
                    raise
                logger.info(
                    "load %s on %s was cut (%s): following the model until it loads", name, self.url, failure.message
                )
            while (
                progress := load_progress(seen := await self._load_seen(name, from_repository=not files), revision)
            ) == LoadProgress.LOADING:
                if remaining() <= 0:
                    raise load_timed_out(name, timeout)
                await asyncio.sleep(min(self._follow_seconds, remaining()))
            if progress == LoadProgress.LOADED:
                return
            if progress == LoadProgress.FAILED:
                raise ControlError(f"load failed for model '{name}': {seen.index_reason}")
            logger.info("%s holds nothing of %s after the cut: sending the load again", self.url, name)
        raise load_timed_out(name, timeout)

    async def _runs_as_sent(self, name: str, sent: model_config_pb2.ModelConfig) -> bool:
        """Whether the model's ready version runs the config sent (see runs_as_sent)."""
        try:
            return runs_as_sent(sent, await self.model_config(name))
        except ControlError:
            return False

    async def _load_seen(self, name: str, from_repository: bool) -> LoadSeen:
        """One look at a model being loaded: its ready config, and its index entry where it has one."""
        try:
            seen = LoadSeen(revision=_revision(await self.model_config(name)), known=True)
        except ControlError as error:
            if error.status != grpc.StatusCode.NOT_FOUND.name:
                raise
            seen = LoadSeen(revision=None, known=UNKNOWN_MODEL not in error.message)
        if not from_repository:
            return seen
        index = await self._index()
        entry = next((entry for entry in index.models if entry.name == name), None)
        if entry is None:
            return seen
        return LoadSeen(seen.revision, seen.known or entry.state == "LOADING", entry.state, entry.reason)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        await self._call(
            f"unload {name}",
            lambda: self._client.unload_model(
                name,
                headers=self._headers,
                unload_dependents=unload_dependents,
                client_timeout=self._timeouts.read_seconds,
            ),
            TRANSIENT,
        )

    async def statistics(self, name: str = "") -> dict[str, ModelStatistics]:
        """Triton's cumulative counters per model since its load; every loaded model when `name` is empty."""
        response = await self._call(
            "statistics",
            lambda: self._client.get_inference_statistics(
                name, headers=self._headers, client_timeout=self._timeouts.read_seconds
            ),
            READ_TRANSIENT,
        )
        return statistics_from_proto(response)

    async def model_config(self, name: str) -> model_config_pb2.ModelConfig:
        """The config Triton runs the model with (defaults filled in)."""
        response = await self._call(
            "config",
            lambda: self._client.get_model_config(
                name, headers=self._headers, client_timeout=self._timeouts.read_seconds
            ),
            READ_TRANSIENT,
        )
        return response.config

    async def ready(self, name: str) -> bool:
        """Whether Triton has a ready version of the model (one cheap call, for waiting on a load)."""
        return await self._call(
            f"ready {name}",
            lambda: self._client.is_model_ready(name, client_timeout=self._timeouts.read_seconds),
            READ_TRANSIENT,
        )

    async def known(self, name: str) -> bool:
        """Whether Triton has heard of the model since it started: loading it, failed to load it, or
        unloaded it (its config reads NOT_FOUND "... has no available versions"), or serves it; not for
        a model never asked for ("... is not found"). Measured, docs/triton-facts.md."""
        try:
            await self.model_config(name)
        except ControlError as error:
            if error.status != grpc.StatusCode.NOT_FOUND.name:
                raise
            return "has no available versions" in error.message
        return True
