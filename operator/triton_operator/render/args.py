"""tritonserver command-line flags from TritonServer.spec (the Triton behaviour behind them: docs/triton-facts.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..protocol.names import CONTROL_HEADER, CONTROL_PROTOCOLS, SHM_HEADER, SHM_PROTOCOLS
from .drain import connection_age_grace_ms

if TYPE_CHECKING:  # the CLI's parser reads the ports without loading the API
    from ..api.server import TritonServerSpec

HTTP_PORT = 8000
GRPC_PORT = 8001
METRICS_PORT = 8002
MODEL_REPOSITORY_PATH = "/models"


def _flag(name: str, value: object) -> str:
    if isinstance(value, bool):
        value = "true" if value else "false"
    return f"--{name}={value}"


def restricted_api_args(control_key: str, shm_key: str | None, locked: Sequence[str] = CONTROL_PROTOCOLS) -> list[str]:
    """Every administrative API behind a key, over HTTP and gRPC alike: the operator's key for the
    control and introspection APIs (`locked`), the sidecars' key for shared-memory registration (Triton
    takes one flag per key and each API in one flag only). Inference, health and metadata stay open, and
    shared memory where there is no shm key (local mode's clients on the developer's machine)."""
    restrictions = [f"{','.join(locked)}:{CONTROL_HEADER}={control_key}"]
    if shm_key is not None:
        restrictions.append(f"{','.join(SHM_PROTOCOLS)}:{SHM_HEADER}={shm_key}")
    return [
        _flag(flag, restriction)
        for restriction in restrictions
        for flag in ("http-restricted-api", "grpc-restricted-protocol")
    ]


def kubernetes_literal(value: str) -> str:
    """`value` as a container's args must hold it to reach the process as written: Kubernetes expands
    `$(VAR)` there from the container's env (the keys' among them) and reads `$$` as `$`."""
    return value.replace("$", "$$")


def _as_written(value: str) -> str:
    return value


def server_args(
    spec: TritonServerSpec,
    control_key: str | None,
    shm_key: str | None = None,
    model_repository: str = MODEL_REPOSITORY_PATH,
    ports: tuple[int, int, int] = (HTTP_PORT, GRPC_PORT, METRICS_PORT),
    auto_complete: bool = False,
    literal: Callable[[str], str] = _as_written,
) -> list[str]:
    """The flags, always the same order for the same spec.

    `control_key` and `shm_key` are the values that unlock the restricted APIs: in a pod `$(ENV)`
    references Kubernetes expands from the Secrets; a None control key leaves every API open (tests
    of other things only), and a None shm key alone is refused (it would leave shared memory open).
    `auto_complete` lets Triton complete configs (`import` asks it to): the operator's servers always get
    a whole config, and a python model loads much faster without it (docs/triton-facts.md). `literal`
    writes what the spec's author gave (the repository URI, extraArgs) so that it reaches Triton as
    written: kubernetes_literal in a pod.
    """
    http, grpc, metrics = ports
    repository = literal(spec.model_repository.uri) if spec.model_repository.uri else model_repository
    args = [
        _flag("model-repository", repository),
        _flag("model-control-mode", "explicit"),
        _flag("strict-readiness", False),
        *([] if auto_complete else ["--disable-auto-complete-config"]),
        _flag("http-port", http),
        _flag("grpc-port", grpc),
        _flag("metrics-port", metrics),
        _flag("exit-timeout-secs", spec.exit_timeout_seconds),
        _flag("backend-config", f"python,shm-default-byte-size={spec.python_backend.shm_default_bytes}"),
        _flag("backend-config", f"python,shm-growth-byte-size={spec.python_backend.shm_growth_bytes}"),
        _flag("log-verbose", spec.logging.verbose),
        _flag("log-info", spec.logging.info),
        _flag("log-warning", spec.logging.warning),
        _flag("log-error", spec.logging.error),
    ]
    if spec.logging.format != "default":
        args.append(_flag("log-format", spec.logging.format))
    if control_key is not None:
        if shm_key is None:
            raise ValueError("a server with a control key needs a shared-memory key too")
        args += restricted_api_args(control_key, shm_key)
    pools = spec.memory_pools
    if pools.pinned_bytes is not None:
        args.append(_flag("pinned-memory-pool-byte-size", pools.pinned_bytes))
    if pools.cuda_bytes_per_gpu is not None:
        args += [
            _flag("cuda-memory-pool-byte-size", f"{gpu}:{pools.cuda_bytes_per_gpu}") for gpu in range(spec.gpus.count)
        ]
    if spec.model_load_thread_count is not None:
        args.append(_flag("model-load-thread-count", spec.model_load_thread_count))
    args += _grpc_args(spec)
    return args + [literal(arg) for arg in spec.extra_args]


def _grpc_args(spec: TritonServerSpec) -> list[str]:
    keepalive = spec.grpc.keepalive
    age = spec.grpc.max_connection_age_ms
    settings: list[tuple[str, object | None]] = [
        ("grpc-max-connection-age", age or None),
        ("grpc-max-connection-age-grace", connection_age_grace_ms(spec) if age else None),
    ]
    if keepalive is not None:
        settings += [
            ("grpc-keepalive-time", keepalive.time_ms),
            ("grpc-keepalive-timeout", keepalive.timeout_ms),
            ("grpc-keepalive-permit-without-calls", keepalive.permit_without_calls),
            ("grpc-http2-max-pings-without-data", keepalive.http2_max_pings_without_data),
            (
                "grpc-http2-min-recv-ping-interval-without-data",
                keepalive.http2_min_recv_ping_interval_without_data_ms,
            ),
            ("grpc-http2-max-ping-strikes", keepalive.http2_max_ping_strikes),
        ]
    return [_flag(name, value) for name, value in settings if value is not None]
