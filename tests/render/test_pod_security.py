"""A server pod is locked down by default: owned flags cannot come back through extraArgs by any
spelling Triton takes, control characters never reach a path or Triton's command line, a user's
security contexts add to the restricted defaults instead of replacing them, and what the restricted Pod Security
Standard forbids is refused in them (a sidecar's too), as is a second container of one name; no service-account
token is mounted, and an old Triton image is warned about. tests/render/test_server_args_on_triton.py shows on a
real tritonserver that the refused prefixes do take effect there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import run
from tests.support.crd_check import crd_errors
from tests.support.resources import BASE_CONFIG, model_document, server_document
from triton_operator.api.extra_args import owned_arg_problem
from triton_operator.api.parse import parse_resources
from triton_operator.api.security import image_problem, merged_over, triton_release
from triton_operator.api.server import DEFAULT_IMAGE
from triton_operator.render.fleet import plan_fleet, server_objects
from triton_operator.render.manifests import CONTROL_KEY

# extraArgs items the operator refuses, and the owned flag the refusal names.
REFUSED_ARGS = [
    ("--model-control=poll", "--model-control (a prefix of --model-control-mode"),
    ("--model-cont=poll", "--model-cont (a prefix of --model-control-mode"),
    ("--model-control", "--model-control (a prefix of --model-control-mode"),  # its value as the next item
    ("--model-control-mode=poll", "--model-control-mode (the operator always runs explicit model control)"),
    ("--p=1048576", "a prefix of --pinned-memory-pool-byte-size"),
    ("--d", "a prefix of --disable-auto-complete-config"),
    ("--strict-r=true", "a prefix of --strict-readiness"),
    ("--http-restricted=model-repository:k=v", "a prefix of --http-restricted-api"),
    ("--grpc-p=9000", "a prefix of --grpc-port"),
    ("--log-v=1", "a prefix of --log-verbose"),
    ("--log-", "a prefix of --log-verbose or --log-info or --log-warning or --log-error or --log-format"),
    ("--backend-c=python,shm-default-byte-size=1048576", "use spec.pythonBackend"),
    ("python,shm-growth-byte-size=1", "use spec.pythonBackend"),  # the value of a `--backend-config` item
]
ACCEPTED_ARGS = [
    "--log-file=/tmp/t.log",
    "--rate-limit=execution_count",
    "--exit-on-error=true",
    "--model-config-name=fast",  # shares --model-c with --model-control-mode, but is an option of its own
    "--backend-config=python,shm-region-prefix-name=x",
    "--backend-directory=/opt/backends",
    "--",
    "-v",
]


@pytest.mark.parametrize(("arg", "words"), REFUSED_ARGS, ids=[arg for arg, _ in REFUSED_ARGS])
def test_an_owned_flag_is_refused_by_any_prefix_naming_the_flag_it_stands_for(arg: str, words: str) -> None:
    assert words in owned_arg_problem(arg)
    document = server_document(extraArgs=[arg])
    servers, _, found = parse_resources([document])
    assert servers == [] and [f.where for f in found] == ["TritonServer/default/triton: spec.extraArgs"]
    assert words in found[0].message and "the operator sets these flags" in found[0].message
    assert crd_errors(document), "the API server's CEL rule would accept it"


@pytest.mark.parametrize("arg", ACCEPTED_ARGS)
def test_other_flags_pass_python_and_the_api_server(arg: str) -> None:
    document = server_document(extraArgs=[arg])
    assert owned_arg_problem(arg) == ""
    assert parse_resources([document])[2] == [] and crd_errors(document) == []


# Strings that reach a file name or Triton's command line, each with a control character.
CONTROL_CHARACTERS = [
    (
        "TritonModel",
        {"files": {"configMapRef": {"name": "f", "items": [{"key": "k", "path": "1/mo\x00del.py"}]}}},
        "spec.files.configMapRef.items.0.path",
        "U+0000) at position 4",
    ),
    (
        "TritonModel",
        {"files": {"configMapRef": {"name": "f", "items": [{"key": "k", "path": "1/model\n.py"}]}}},
        "spec.files.configMapRef.items.0.path",
        "U+000A) at position 7",
    ),
    ("TritonServer", {"extraArgs": ["--log-file=/tmp/a\x00b"]}, "spec.extraArgs.0", "U+0000"),
    ("TritonServer", {"modelRepository": {"uri": "s3://bucket/m\x1b[0m"}}, "spec.modelRepository.uri", "U+001B"),
    (
        "TritonServer",
        {"modelRepository": {"pvc": {"claimName": "c", "subPath": "models\x7f"}}},
        "spec.modelRepository.pvc.subPath",
        "U+007F",
    ),
    ("TritonModel", {"modelName": "add\x00sub"}, "spec.modelName", "cannot be a Triton model name"),
]


@pytest.mark.parametrize(
    ("kind", "spec", "path", "words"), CONTROL_CHARACTERS, ids=[path for _, _, path, _ in CONTROL_CHARACTERS]
)
def test_control_characters_are_refused_naming_the_field(
    kind: str, spec: dict[str, Any], path: str, words: str
) -> None:
    document = model_document(BASE_CONFIG, **spec) if kind == "TritonModel" else server_document(**spec)
    resources = parse_resources([document])
    assert resources[0] == resources[1] == []
    [finding] = resources[2]
    assert finding.where.endswith(f": {path}") and words in finding.message
    assert crd_errors(document), "the API server would accept it"


def test_a_nul_in_a_files_path_is_an_error_of_validate_and_render_not_a_crash(tmp_path: Path) -> None:
    model = model_document(
        BASE_CONFIG, files={"configMapRef": {"name": "f", "items": [{"key": "k", "path": "1/mo\x00del.py"}]}}
    )
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(model))
    for argv in (["validate", str(path)], ["render", str(path), "--out", str(tmp_path / "out")]):
        code, _, err = run(*argv)
        assert code == 1 and "spec.files.configMapRef.items.0.path" in err and "U+0000" in err, err
        assert "unexpected error" not in err


@pytest.mark.parametrize(
    ("defaults", "given", "merged"),
    [
        ({"a": 1, "b": {"c": 2, "d": 3}}, None, {"a": 1, "b": {"c": 2, "d": 3}}),
        ({"a": 1, "b": {"c": 2, "d": 3}}, {"a": 5}, {"a": 5, "b": {"c": 2, "d": 3}}),
        ({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"c": 9}}, {"a": 1, "b": {"c": 9, "d": 3}}),
        ({"a": 1, "b": {"c": [1]}}, {"b": {"c": []}, "e": 4}, {"a": 1, "b": {"c": []}, "e": 4}),  # lists whole
        ({"a": {"x": 1}}, {"a": None}, {"a": None}),
    ],
)
def test_a_users_fields_win_over_the_defaults_and_the_rest_stay(
    defaults: dict[str, Any], given: dict[str, Any] | None, merged: dict[str, Any]
) -> None:
    assert merged_over(defaults, given) == merged


def _pod(**pod: Any) -> dict[str, Any]:
    servers, models, found = parse_resources([server_document(pod=pod)])
    assert found == []
    [rendered] = plan_fleet(servers, models).servers
    [deployment] = [obj for obj in server_objects(rendered, {CONTROL_KEY: "key"}) if obj["kind"] == "Deployment"]
    return deployment["spec"]["template"]["spec"]


def test_fs_group_alone_keeps_run_as_non_root_and_the_seccomp_profile() -> None:
    pod = _pod(
        securityContext={"fsGroup": 2000},
        containerSecurityContext={"readOnlyRootFilesystem": False, "capabilities": {"add": ["NET_BIND_SERVICE"]}},
    )
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 2000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    triton = pod["containers"][0]
    assert triton["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": False,
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
    }


def test_triton_pods_mount_no_service_account_token_unless_asked() -> None:
    assert _pod()["automountServiceAccountToken"] is False
    assert _pod(automountServiceAccountToken=True)["automountServiceAccountToken"] is True


def _warnings(**spec: Any) -> list[tuple[str, str]]:
    servers, models, found = parse_resources([server_document(**spec)])
    assert found == []
    return [(f.path, f.message) for f in plan_fleet(servers, models).findings if f.severity == "warning"]


def _refused(**spec: Any) -> list[tuple[str, str]]:
    """The server is refused: each finding's path and message."""
    servers, _, found = parse_resources([server_document(**spec)])
    assert servers == [] and found, "the server was taken"
    assert all(f.severity == "error" for f in found)
    return [(f.path, f.message) for f in found]


# What a securityContext may set that the restricted Pod Security Standard forbids, as (where, context, field):
# the pod's own context, Triton's container's (merged over the operator's restricted defaults) or a sidecar's.
FORBIDDEN = [
    ("containerSecurityContext", {"privileged": True}, "privileged"),
    ("containerSecurityContext", {"allowPrivilegeEscalation": True}, "allowPrivilegeEscalation"),
    ("containerSecurityContext", {"capabilities": {"drop": []}}, "capabilities.drop"),
    ("containerSecurityContext", {"capabilities": {"drop": ["NET_RAW"]}}, "capabilities.drop"),
    ("containerSecurityContext", {"capabilities": None}, "capabilities"),
    ("containerSecurityContext", {"capabilities": {"add": ["SYS_ADMIN"], "drop": ["ALL"]}}, "capabilities.add"),
    ("containerSecurityContext", {"runAsNonRoot": False}, "runAsNonRoot"),
    ("containerSecurityContext", {"runAsUser": 0}, "runAsUser"),
    ("containerSecurityContext", {"seccompProfile": {"type": "Unconfined"}}, "seccompProfile.type"),
    ("containerSecurityContext", {"appArmorProfile": {"type": "Unconfined"}}, "appArmorProfile.type"),
    ("containerSecurityContext", {"procMount": "Unmasked"}, "procMount"),
    ("containerSecurityContext", {"windowsOptions": {"hostProcess": True}}, "windowsOptions.hostProcess"),
    ("securityContext", {"runAsNonRoot": None}, "runAsNonRoot"),
    ("securityContext", {"runAsNonRoot": False}, "runAsNonRoot"),
    ("securityContext", {"runAsUser": 0}, "runAsUser"),
    ("securityContext", {"seccompProfile": None}, "seccompProfile"),
    ("securityContext", {"seccompProfile": {"type": "Unconfined"}}, "seccompProfile.type"),
    ("securityContext", {"windowsOptions": {"hostProcess": True}}, "windowsOptions.hostProcess"),
]


@pytest.mark.parametrize(
    ("where", "context", "field"), FORBIDDEN, ids=[f"{where}-{context}" for where, context, _ in FORBIDDEN]
)
def test_what_the_restricted_pod_security_standard_forbids_is_refused_naming_the_field(
    where: str, context: dict[str, Any], field: str
) -> None:
    [(path, message)] = _refused(pod={where: context})
    assert path == f"spec.pod.{where}.{field}"
    assert "restricted Pod Security Standard forbids" in message


@pytest.mark.parametrize(
    ("context", "field"),
    [(context, field) for where, context, field in FORBIDDEN if where == "containerSecurityContext"],
    ids=[str(context) for where, context, _ in FORBIDDEN if where == "containerSecurityContext"],
)
def test_a_sidecar_is_held_to_the_same_standard(context: dict[str, Any], field: str) -> None:
    sidecars = [
        {"name": "plain", "image": "busybox"},
        {"name": "scaler", "image": "busybox", "securityContext": context},
    ]
    [(path, message)] = _refused(pod={"sidecars": sidecars})
    assert path == f"spec.pod.sidecars[1].securityContext.{field}"
    assert message.startswith("sidecar 'scaler' ") and "restricted Pod Security Standard forbids" in message


@pytest.mark.parametrize(
    "pod",
    [
        {"containerSecurityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}}},
        {"containerSecurityContext": {"runAsNonRoot": None, "seccompProfile": None}},  # the pod's hold
        {"containerSecurityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "triton.json"}}},
        {"containerSecurityContext": {"procMount": "Default", "windowsOptions": {"hostProcess": False}}},
        {"securityContext": {"fsGroup": 2000, "runAsUser": 1234}},
        # Without the pod's, every container's own says it
        {
            "securityContext": {"runAsNonRoot": None, "seccompProfile": None},
            "containerSecurityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "sidecars": [
                {
                    "name": "s",
                    "image": "busybox",
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                }
            ],
        },
    ],
)
def test_what_the_restricted_standard_allows_passes(pod: dict[str, Any]) -> None:
    assert parse_resources([server_document(pod=pod)])[2] == []


def test_a_second_container_of_a_name_in_the_pod_is_refused() -> None:
    """A sidecar named after Triton's container (or the memory sidecar, or another sidecar) would make two
    containers of one name: refused, naming the sidecar."""
    for names, index in ((["tritonserver"], 0), (["memory-reader"], 0), (["a", "b", "a"], 2)):
        sidecars = [{"name": name, "image": "busybox"} for name in names]
        [(path, message)] = _refused(pod={"sidecars": sidecars})
        assert path == f"spec.pod.sidecars[{index}].name" and f"'{names[index]}'" in message


@pytest.mark.parametrize(
    ("image", "release"),
    [
        ("nvcr.io/nvidia/tritonserver:24.10-py3", (24, 10)),
        ("nvcr.io/nvidia/tritonserver:25.06-py3-min", (25, 6)),
        ("nvcr.io/nvidia/tritonserver:24.08-trtllm-python-py3", (24, 8)),
        ("registry.example.com:5000/mirror/tritonserver:23.05-py3", (23, 5)),
        ("nvcr.io/nvidia/tritonserver:20.03.1-py3", (20, 3)),
        ("nvcr.io/nvidia/tritonserver:24.10-py3@sha256:" + "0" * 64, (24, 10)),
        ("nvcr.io/nvidia/tritonserver:25.07-py3", (25, 7)),
        ("nvcr.io/nvidia/tritonserver@sha256:" + "0" * 64, None),
        ("nvcr.io/nvidia/tritonserver:latest", None),
        ("registry.example.com/ml/my-tritonserver:24.10", None),
        ("registry.example.com/ml/triton:24.10-py3", None),
    ],
)
def test_the_triton_release_is_read_from_nvidias_tags_only(image: str, release: tuple[int, int] | None) -> None:
    assert triton_release(image) == release


def test_an_image_older_than_the_advisories_fix_is_a_warning_naming_them_and_the_minimum_tag() -> None:
    [(path, message)] = _warnings(image="nvcr.io/nvidia/tritonserver:24.10-py3")
    assert path == "spec.image"
    assert all(
        word in message
        for word in ("CVE-2025-23319", "CVE-2025-23320", "CVE-2025-23334", "CVE-2025-23310", "CVE-2025-23311", "25.07")
    )
    assert (
        image_problem("nvcr.io/nvidia/tritonserver:25.07-py3")
        == image_problem("registry.example.com/ml/triton:1.0")
        == ""
    )


def test_the_default_image_is_past_the_advisories() -> None:
    assert triton_release(DEFAULT_IMAGE) >= (25, 7) and _warnings() == []
