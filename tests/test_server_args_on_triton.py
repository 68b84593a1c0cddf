"""The flags the renderer writes (LocalTriton runs exactly them) are accepted by a real tritonserver,
and the restricted control API answers only to the operator's key (over HTTP and gRPC)."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

import pydantic
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support.ports import free_ports
from triton_operator.api.server import TritonServerSpec, owned_arg_problem
from triton_operator.local.tritonserver import LocalTriton, Ports
from triton_operator.protocol.names import CONTROL_HEADER, GRPC_CONTROL_METADATA

pytestmark = pytest.mark.triton

KEY = "s3cret"
SPEC = TritonServerSpec.model_validate(
    {
        "memoryPools": {"pinnedBytes": "64Mi"},
        "grpc": {
            "keepalive": {"timeMs": 7200000, "timeoutMs": 20000, "permitWithoutCalls": True, "http2MaxPingsWithoutData": 2,
                          "http2MinRecvPingIntervalWithoutDataMs": 300000, "http2MaxPingStrikes": 2},
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
    with LocalTriton(SPEC, tmp_path_factory.mktemp("triton"), ports, control_key=KEY):
        yield ports.http, ports.grpc


def _index(http: int, headers: dict[str, str]) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{http}/v2/repository/index", data=b"{}", headers=headers, method="POST")
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


@pytest.mark.parametrize(("extra", "option", "value"), PREFIXES_TRITON_TAKES, ids=[" ".join(e) for e, _, _ in PREFIXES_TRITON_TAKES])
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
