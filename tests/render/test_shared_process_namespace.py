"""The memory reader shares the pod's process namespace: with sidecars of the user's beside it, they read
tritonserver's command line, where Triton takes its keys (docs/triton-facts.md); the server is warned, the
keys named, and the pod's rendering shows why."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.resources import server_document
from triton_operator.api.parse import parse_resources
from triton_operator.render.deployment import deployment
from triton_operator.render.fleet import plan_fleet
from triton_operator.render.manifests import CONTROL_KEY, KEY_SECRETS, SHM_KEY
from triton_operator.render.shm import ShmPlan

SIDECARS = [{"name": "proxy", "image": "envoy"}, {"name": "logs", "image": "fluent-bit"}]


def _warnings(**spec: Any) -> list[tuple[str, str]]:
    servers, models, found = parse_resources([server_document(**spec)])
    assert found == []
    return [(f.path, f.message) for f in plan_fleet(servers, models).findings if f.severity == "warning"]


def test_the_keys_are_on_tritonservers_command_line_for_every_container_sharing_its_processes() -> None:
    servers, _, _ = parse_resources([server_document(memoryReader={"enabled": True}, pod={"sidecars": SIDECARS})])
    pod = deployment(servers[0], ShmPlan(), None)["spec"]["template"]["spec"]
    (triton,) = [c for c in pod["containers"] if c["name"] == "tritonserver"]
    assert pod["shareProcessNamespace"] is True
    on_command_line = [key.env for key in KEY_SECRETS if any(f"$({key.env})" in arg for arg in triton["args"])]
    assert on_command_line == [CONTROL_KEY.env, SHM_KEY.env]  # Kubernetes expands them into the args


def test_sidecars_sharing_the_process_namespace_are_a_warning_naming_both_keys() -> None:
    [(path, message)] = _warnings(memoryReader={"enabled": True}, pod={"sidecars": SIDECARS})
    assert path == "spec.memoryReader.enabled"
    assert all(word in message for word in ("'proxy', 'logs'", "control key", "shared-memory key", "command line"))


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"memoryReader": {"enabled": True}}, id="the reader alone"),
        pytest.param({"pod": {"sidecars": SIDECARS}}, id="sidecars, no shared namespace"),
    ],
)
def test_no_warning_without_both(spec: dict[str, Any]) -> None:
    assert _warnings(**spec) == []
