"""The flags the renderer writes (LocalTriton runs exactly them) are accepted by a real tritonserver,
and every administrative API answers only to its key (over HTTP and gRPC): the operator's key for
the control, model-config, statistics, trace and logging APIs, the sidecars' key for shared memory
and nothing else. Inference, health and metadata stay open."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

import pydantic
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support.models import DOUBLING_CODE, load, python_model
from tests.support.ports import free_ports
from triton_operator.api.extra_args import owned_arg_problem
from triton_operator.api.server import TritonServerSpec
from triton_operator.client import SharedMemoryPool
from triton_operator.client.regions import SHM_HEADER as CLIENT_SHM_HEADER
from triton_operator.local.tritonserver import LocalTriton, Ports
from triton_operator.protocol.names import CONTROL_HEADER, GRPC_CONTROL_METADATA, SHM_HEADER

pytestmark = pytest.mark.triton

KEY = "s3cret"
SHM_KEY = "sh4red"
GRPC_SHM_METADATA = f"triton-grpc-protocol-{SHM_HEADER}"
MODEL_CONFIG = {
    "backend": "python",
    "maxBatchSize": 0,
    "input": [{"name": "IN", "dataType": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUT", "dataType": "TYPE_FP32", "dims": [-1]}],
}
SPEC = TritonServerSpec.model_validate(
    {
        "memoryPools": {"pinnedBytes": "64Mi"},
        "grpc": {
            "keepalive": {
                "timeMs": 7200000,
                "timeoutMs": 20000,
                "permitWithoutCalls": True,
                "http2MaxPingsWithoutData": 2,
                "http2MinRecvPingIntervalWithoutDataMs": 300000,
                "http2MaxPingStrikes": 2,
            },
            "maxConnectionAgeMs": 600000,
            "maxConnectionAgeGraceMs": 5000,
        },
        "drain": {"maxRequestSeconds": 5},
        "pythonBackend": {"shmDefaultBytes": "2Mi", "shmGrowthBytes": "1Mi"},
        "logging": {"verbose": 0, "format": "ISO8601"},
        "modelLoadThreadCount": 2,
        "exitTimeoutSeconds": 5,
    }
)


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory):
    ports = Ports(*free_ports(3))
    with LocalTriton(SPEC, tmp_path_factory.mktemp("triton"), ports, control_key=KEY, shm_key=SHM_KEY) as server:
        load(server, python_model("double", MODEL_CONFIG, DOUBLING_CODE), control_key=KEY)
        yield ports.http, ports.grpc


def _index(http: int, headers: dict[str, str]) -> int:
    return _status(http, "POST", "/v2/repository/index", headers)


def _status(http: int, method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> int:
    """The HTTP status Triton answers a request with."""
    data = body if body is not None else (b"{}" if method == "POST" else None)
    request = urllib.request.Request(f"http://127.0.0.1:{http}{path}", data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_server_is_ready_without_models_under_non_strict_readiness(triton: tuple[int, int]) -> None:
    http, _ = triton
    with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=5) as response:
        assert response.status == 200


def test_http_control_api_needs_the_key(triton: tuple[int, int]) -> None:
    http, _ = triton
    assert _index(http, {}) == 403
    assert _index(http, {CONTROL_HEADER: "wrong"}) == 403
    assert _index(http, {CONTROL_HEADER: KEY}) == 200


def test_grpc_control_api_needs_the_key(triton: tuple[int, int]) -> None:
    _, grpc = triton
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
    try:
        with pytest.raises(InferenceServerException):
            client.get_model_repository_index()
        assert client.get_model_repository_index(headers={GRPC_CONTROL_METADATA: KEY}) is not None
        assert client.is_server_live()  # inference and health stay open
    finally:
        client.close()


def _option(log: Path, name: str) -> str:
    """A row of the options table Triton logs as it starts, e.g. model_control_mode -> MODE_POLL."""
    match = re.search(rf"^\| {name} +\| (\S+)", log.read_text(), re.MULTILINE)
    assert match, f"no {name} in the log"
    return match.group(1)


# Spellings the operator refuses, and what Triton makes of them after the operator's own flags (the last wins).
PREFIXES_TRITON_TAKES = [
    (["--model-cont=poll"], "model_control_mode", "MODE_POLL"),
    (["--model-control", "poll"], "model_control_mode", "MODE_POLL"),
    (["--p=1048576"], "pinned_memory_pool_byte_size", "1048576"),
    (["--strict-r=true"], "strict_readiness", "1"),
]


@pytest.mark.parametrize(
    ("extra", "option", "value"), PREFIXES_TRITON_TAKES, ids=[" ".join(e) for e, _, _ in PREFIXES_TRITON_TAKES]
)
def test_the_prefixes_of_owned_flags_that_validation_refuses_do_take_effect_in_triton(
    extra: list[str], option: str, value: str, tmp_path: Path
) -> None:
    """Why the owned-flags rule covers prefixes: Triton's getopt_long takes an unambiguous prefix for the
    whole option, so each of these would undo what the operator set."""
    assert owned_arg_problem(extra[0])
    with pytest.raises(pydantic.ValidationError):
        TritonServerSpec.model_validate({**SPEC.model_dump(by_alias=True), "extraArgs": extra})
    spec = SPEC.model_copy(update={"extra_args": extra})  # what the operator would have run without the rule
    ports = Ports(*free_ports(3))
    with LocalTriton(spec, tmp_path, ports, control_key=KEY) as triton:
        assert _option(triton.log_path, option) == value
        if value == "MODE_POLL":
            client = grpcclient.InferenceServerClient(f"127.0.0.1:{ports.grpc}")
            try:
                with pytest.raises(InferenceServerException, match="polling is enabled"):
                    client.load_model("any", headers={GRPC_CONTROL_METADATA: KEY})
            finally:
                client.close()


# Each administrative API over HTTP: (method, path, body); the key that unlocks it.
CONTROL_APIS = [
    ("POST", "/v2/repository/index", None),
    ("GET", "/v2/models/double/config", None),
    ("GET", "/v2/models/stats", None),
    ("GET", "/v2/logging", None),
    ("POST", "/v2/logging", b'{"log_verbose_level": 0}'),
    ("GET", "/v2/trace/setting", None),
]
SHM_APIS = [
    ("GET", "/v2/systemsharedmemory/status", None),
    ("POST", "/v2/systemsharedmemory/unregister", b"{}"),
]
OPEN_APIS = [
    ("GET", "/v2/health/live", None),
    ("GET", "/v2/health/ready", None),
    ("GET", "/v2", None),
    ("GET", "/v2/models/double", None),
]


@pytest.mark.parametrize("method, path, body", CONTROL_APIS)
def test_http_administrative_apis_answer_only_to_the_operators_key(
    triton: tuple[int, int], method: str, path: str, body: bytes | None
) -> None:
    http, _ = triton
    assert _status(http, method, path, {}, body) == 403
    assert _status(http, method, path, {SHM_HEADER: SHM_KEY}, body) == 403  # the sidecars' key opens none of them
    assert _status(http, method, path, {CONTROL_HEADER: KEY}, body) == 200


@pytest.mark.parametrize("method, path, body", SHM_APIS)
def test_http_shared_memory_answers_only_to_the_sidecars_key(
    triton: tuple[int, int], method: str, path: str, body: bytes | None
) -> None:
    http, _ = triton
    assert _status(http, method, path, {}, body) == 403
    assert _status(http, method, path, {CONTROL_HEADER: KEY}, body) == 403  # the operator's key does not open it
    assert _status(http, method, path, {SHM_HEADER: SHM_KEY}, body) == 200


@pytest.mark.parametrize("method, path, body", OPEN_APIS)
def test_health_and_metadata_stay_open(triton: tuple[int, int], method: str, path: str, body: bytes | None) -> None:
    http, _ = triton
    assert _status(http, method, path, {}, body) == 200


def test_grpc_statistics_logging_and_config_need_the_operators_key(triton: tuple[int, int]) -> None:
    _, grpc = triton
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
    calls = [
        lambda headers: client.get_inference_statistics("double", headers=headers),
        lambda headers: client.get_model_config("double", headers=headers),
        lambda headers: client.get_log_settings(headers=headers),
        lambda headers: client.update_log_settings({"log_verbose_level": 0}, headers=headers),
        lambda headers: client.get_trace_settings(headers=headers),
    ]
    try:
        for call in calls:
            for wrong in (None, {GRPC_SHM_METADATA: SHM_KEY}, {GRPC_CONTROL_METADATA: "wrong"}):
                with pytest.raises(InferenceServerException, match="restricted"):
                    call(wrong)
            assert call({GRPC_CONTROL_METADATA: KEY}) is not None
    finally:
        client.close()


def test_the_sidecars_key_registers_shared_memory_and_cannot_load_models(triton: tuple[int, int]) -> None:
    """A client pool registers with the shm key (and is refused without it); that key cannot load a model."""
    _, grpc = triton
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
    try:
        with pytest.raises(InferenceServerException, match="restricted"):
            SharedMemoryPool(client, regions=1, region_bytes=1 << 16, prefix="keyless").open()
        with pytest.raises(InferenceServerException, match="restricted"):
            SharedMemoryPool(client, regions=1, region_bytes=1 << 16, prefix="controlled", key=KEY).open()
        with SharedMemoryPool(client, regions=2, region_bytes=1 << 16, prefix="sidecar", key=SHM_KEY) as pool:
            status = client.get_system_shared_memory_status(headers={GRPC_SHM_METADATA: SHM_KEY})
            assert sorted(name for name in status.regions if name.startswith("sidecar")) == pool.names
        for headers in ({GRPC_SHM_METADATA: SHM_KEY}, None):
            with pytest.raises(InferenceServerException, match="restricted"):
                client.load_model("double", headers=headers)
            with pytest.raises(InferenceServerException, match="restricted"):
                client.unload_model("double", headers=headers)
        assert client.is_model_ready("double")  # still served: nothing unloaded it
    finally:
        client.close()


def test_the_client_package_names_the_servers_shm_header() -> None:
    """client/ imports nothing of the operator, so it keeps its own copy of the header's name."""
    assert CLIENT_SHM_HEADER == SHM_HEADER
