"""Every option of tritonserver, as its `--help` lists them, and which of them the operator owns.

The table is Triton's own (the wheel's tritonserver 2.59; tests/api/test_triton_options.py holds it to
that binary's --help), so an option Triton adds, or an alias of one the operator sets, cannot slip past
extraArgs unnoticed: each is listed here, owned with the reason or free (None). Owned: what the operator
sets, and what changes the pod's contract, which its probes, Service, NetworkPolicy, control calls and
status rely on (ports, addresses and protocols, the model repository and which models load, the
restricted APIs and their keys).
"""

_LOGGING = "use spec.logging"
_PORTS = (
    "the pod serves HTTP on 8000, gRPC on 8001 and metrics on 8002, on every address: its probes, Service, "
    "NetworkPolicy, autoscaler and the operator's control calls reach them there"
)
_SHARED_PORT = "another process of the pod could take connections on the port, the operator's control calls among them"
_KEYS = "the restricted APIs answer only to the keys from the operator's Secrets"
_ENDPOINT = "an endpoint the pod does not declare: no probe, Service or NetworkPolicy of the operator's covers it"
_GRPC = "use spec.grpc"
_TLS = "the operator's control calls speak plain gRPC to the pod"
_MODELS = (
    "the operator loads each model itself, from spec.modelRepository or its files, and reports it in its status: "
    "another repository or a model loaded at start-up would be served unseen"
)

TRITON_OPTIONS: dict[str, str | None] = {
    "--help": "it prints the usage and exits: the pod would never serve",
    "--id": None,
    "--exit-timeout-secs": "use spec.exitTimeoutSeconds",
    "--log-verbose": _LOGGING,
    "--log-info": _LOGGING,
    "--log-warning": _LOGGING,
    "--log-error": _LOGGING,
    "--log-format": _LOGGING,
    "--log-file": None,
    "--model-store": "Triton's other name for --model-repository: use spec.modelRepository",
    "--model-repository": "use spec.modelRepository",
    "--exit-on-error": None,
    "--disable-auto-complete-config": "the operator always sends a complete config",
    "--strict-readiness": "readiness is gated per pod by the operator",
    "--model-control-mode": "the operator always runs explicit model control",
    "--repository-poll-secs": None,
    "--load-model": _MODELS,
    "--model-config-name": None,
    "--model-load-thread-count": "use spec.modelLoadThreadCount",
    "--model-load-retry-count": None,
    "--model-namespacing": None,
    "--enable-peer-access": None,
    "--allow-http": _PORTS,
    "--http-address": _PORTS,
    "--http-port": _PORTS,
    "--reuse-http-port": _SHARED_PORT,
    "--http-header-forward-pattern": None,
    "--http-thread-count": None,
    "--http-restricted-api": _KEYS,
    "--allow-grpc": _PORTS,
    "--grpc-address": _PORTS,
    "--grpc-port": _PORTS,
    "--reuse-grpc-port": _SHARED_PORT,
    "--grpc-header-forward-pattern": None,
    "--grpc-infer-allocation-pool-size": None,
    "--grpc-use-ssl": _TLS,
    "--grpc-use-ssl-mutual": _TLS,
    "--grpc-server-cert": None,
    "--grpc-server-key": None,
    "--grpc-root-cert": None,
    "--grpc-infer-response-compression-level": None,
    "--grpc-keepalive-time": _GRPC,
    "--grpc-keepalive-timeout": _GRPC,
    "--grpc-keepalive-permit-without-calls": _GRPC,
    "--grpc-http2-max-pings-without-data": _GRPC,
    "--grpc-http2-min-recv-ping-interval-without-data": _GRPC,
    "--grpc-http2-max-ping-strikes": _GRPC,
    "--grpc-max-connection-age": _GRPC,
    "--grpc-max-connection-age-grace": _GRPC,
    "--grpc-restricted-protocol": _KEYS,
    "--allow-sagemaker": _ENDPOINT,
    "--sagemaker-port": _ENDPOINT,
    "--sagemaker-safe-port-range": _ENDPOINT,
    "--sagemaker-thread-count": None,
    "--allow-vertex-ai": _ENDPOINT,
    "--vertex-ai-port": _ENDPOINT,
    "--vertex-ai-thread-count": None,
    "--vertex-ai-default-model": None,
    "--allow-metrics": _PORTS,
    "--allow-gpu-metrics": None,
    "--allow-cpu-metrics": None,
    "--metrics-address": _PORTS,
    "--metrics-port": _PORTS,
    "--metrics-interval-ms": None,
    "--metrics-config": None,
    "--trace-config": None,
    "--backend-directory": None,
    "--backend-config": None,  # but for the python backend's shm sizes: extra_args.py's OWNED_BACKEND_CONFIG
    "--repoagent-directory": None,
    "--cache-config": None,
    "--cache-directory": None,
    "--rate-limit": None,
    "--rate-limit-resource": None,
    "--pinned-memory-pool-byte-size": "use spec.memoryPools.pinnedBytes",
    "--cuda-memory-pool-byte-size": "use spec.memoryPools.cudaBytesPerGpu",
    "--cuda-virtual-address-size": None,
    "--min-supported-compute-capability": None,
    "--buffer-manager-thread-count": None,
    "--host-policy": None,
    "--model-load-gpu-limit": None,
    "--strict-model-config": "Triton's deprecated inverse of --disable-auto-complete-config (false turns auto-complete "
    "on): the operator always sends a complete config",
    "--response-cache-byte-size": None,
    "--trace-file": None,
    "--trace-level": None,
    "--trace-rate": None,
    "--trace-count": None,
    "--trace-log-frequency": None,
}

# Options that are another's other name (Triton's --help says so, or its deprecation note does).
TRITON_ALIASES = {
    "--model-store": "--model-repository",
    "--strict-model-config": "--disable-auto-complete-config",
    "--response-cache-byte-size": "--cache-config",
    "--trace-file": "--trace-config",
    "--trace-level": "--trace-config",
    "--trace-rate": "--trace-config",
    "--trace-count": "--trace-config",
    "--trace-log-frequency": "--trace-config",
}
