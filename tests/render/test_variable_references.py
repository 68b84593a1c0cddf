"""Kubernetes expands `$(VAR)` in a container's command and args from that container's env, and the
tritonserver container's env holds the operator's control key and the sidecars' shared-memory key: a
`$(...)` in spec.extraArgs or spec.modelRepository.uri would put a key into Triton's command line, and from
there into a log or trace file's name, a repository URI or a log line. Those values are written literally
(each `$` doubled, which Kubernetes reads as one `$`), so Triton gets them as their author wrote them, while
the operator's own references to the keys still expand."""

from __future__ import annotations

from typing import Any

from tests.support.minicluster.kubelet import expand_references
from triton_operator.api.parse import parse_resources
from triton_operator.api.server import TritonServerSpec
from triton_operator.render.args import server_args
from triton_operator.render.fleet import plan_fleet, server_objects
from triton_operator.render.manifests import CONTROL_KEY, KEY_SECRETS, SHM_KEY

KEYS = {CONTROL_KEY.env: "the-control-key", SHM_KEY.env: "the-shm-key"}
EXTRA_ARGS = [
    f"--trace-config=triton,file=/tmp/$({CONTROL_KEY.env})",
    f"--id=$({SHM_KEY.env})",
    "--log-file=/tmp/$$(HOME)$",
    "--http-header-forward-pattern=^x-(a|b)$",
]
URI = f"s3://models/$({CONTROL_KEY.env})/fleet"


def _container(**spec: Any) -> dict[str, Any]:
    document = {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonServer",
        "metadata": {"name": "triton", "namespace": "default"},
        "spec": spec,
    }
    servers, models, found = parse_resources([document])
    assert found == []
    [rendered] = plan_fleet(servers, models).servers
    [deployment] = [o for o in server_objects(rendered, {CONTROL_KEY: "k"}) if o["kind"] == "Deployment"]
    [container] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "tritonserver"]
    return container


def _as_the_kubelet_runs_it(container: dict[str, Any]) -> list[str]:
    """The container's command line with its env's references expanded, the keys being KEYS."""
    env = {variable["name"]: KEYS.get(variable["name"], "") for variable in container["env"]}
    assert {which.env for which in KEY_SECRETS} <= set(env)
    return [expand_references(word, env) for word in [*container["command"], *container["args"]]]


def test_extra_args_and_the_repository_uri_reach_triton_as_written() -> None:
    container = _container(extraArgs=EXTRA_ARGS, modelRepository={"uri": URI})
    run = _as_the_kubelet_runs_it(container)
    assert run[-len(EXTRA_ARGS) :] == EXTRA_ARGS
    assert f"--model-repository={URI}" in run


def test_only_the_operators_own_references_expand_to_the_keys() -> None:
    run = _as_the_kubelet_runs_it(_container(extraArgs=EXTRA_ARGS, modelRepository={"uri": URI}))
    holding_a_key = [word for word in run if any(key in word for key in KEYS.values())]
    assert holding_a_key and all(
        word.startswith(("--http-restricted-api=", "--grpc-restricted-protocol=")) for word in holding_a_key
    )


def test_arguments_for_a_process_of_ones_own_are_as_written() -> None:
    """No kubelet expands the arguments of a tritonserver run directly (local mode): they stay as written."""
    spec = TritonServerSpec.model_validate({"extraArgs": EXTRA_ARGS, "modelRepository": {"uri": URI}})
    args = server_args(spec, control_key="k", shm_key="s")
    assert args[-len(EXTRA_ARGS) :] == EXTRA_ARGS and f"--model-repository={URI}" in args
