"""Pure rendering: server flags, /dev/shm sizing, and Kubernetes objects that pass the 1.30 schema."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from kubernetes.utils.quantity import parse_quantity
from tritonclient.utils import triton_to_np_dtype

from tests.support.fleet import varied_fleet
from tests.support.resources import BASE_CONFIG, VARIABLE_DIMS, model_document
from triton_operator.api import config_json as modelconfig
from triton_operator.api.config_json import parse_model_config
from triton_operator.api.crd import structural_schema
from triton_operator.api.parse import parse_resources
from triton_operator.api.resources import TritonModel, TritonServer
from triton_operator.api.server import TritonServerSpec
from triton_operator.api.traffic import NetworkPeer
from triton_operator.api.types import MiB
from triton_operator.protocol.names import REVISION_PARAMETER
from triton_operator.protocol.triton_proto import model_config_pb2
from triton_operator.render import drain, manifests
from triton_operator.render.args import server_args
from triton_operator.render.config import built_model_config, config_revision, files_digest
from triton_operator.render.deployment import (
    RESTRICTED_CONTAINER_SECURITY_CONTEXT,
    deployment,
    deployment_keeping_sizes,
)
from triton_operator.render.fleet import model_config_maps, plan_fleet, server_objects
from triton_operator.render.revisions import desired_from_config_map, revision_config_map
from triton_operator.render.schema import check_manifests
from triton_operator.render.shm import (
    FLOOR_BYTES,
    ShmPlan,
    execution_bytes,
    instance_count,
    model_shm,
    region_bytes,
    shm_plan,
)


def spec(**fields: Any) -> TritonServerSpec:
    return TritonServerSpec.model_validate(fields)


def server(name: str = "triton", uid: str | None = "u-1", **fields: Any) -> TritonServer:
    metadata = {"name": name, "namespace": "ml", **({"uid": uid} if uid else {})}
    return TritonServer.model_validate(
        {"apiVersion": "triton-operator.io/v1alpha1", "kind": "TritonServer", "metadata": metadata, "spec": fields}
    )


def model(config: dict[str, Any], name: str = "m", **spec_fields: Any) -> TritonModel:
    return TritonModel.model_validate(
        model_document(config, **spec_fields) | {"metadata": {"name": name, "namespace": "ml", "uid": "u-2"}}
    )


# -- server flags --------------------------------------------------------------------------------


def test_default_flags_are_explicit_non_strict_and_restricted() -> None:
    args = server_args(spec(), control_key="$(KEY)", shm_key="$(SHM)")
    assert args[:4] == [
        "--model-repository=/models",
        "--model-control-mode=explicit",
        "--strict-readiness=false",
        "--disable-auto-complete-config",
    ]
    control = "model-repository,model-config,statistics,trace,logging:triton-operator-key=$(KEY)"
    assert f"--http-restricted-api={control}" in args and f"--grpc-restricted-protocol={control}" in args
    assert "--http-restricted-api=shared-memory:triton-shm-key=$(SHM)" in args
    assert "--grpc-restricted-protocol=shared-memory:triton-shm-key=$(SHM)" in args
    assert [a for a in args if "restricted" in a and ("inference" in a or "health" in a or "metadata" in a)] == []
    assert "--backend-config=python,shm-default-byte-size=1048576" in args
    assert "--exit-timeout-secs=30" in args


def test_no_control_key_leaves_the_control_api_open() -> None:
    assert not [a for a in server_args(spec(), control_key=None) if "restricted" in a]


def test_a_control_key_without_a_shm_key_is_refused() -> None:
    """It would leave shared-memory registration open."""
    with pytest.raises(ValueError, match="shared-memory key"):
        server_args(spec(), control_key="k")


def test_every_typed_setting_becomes_its_flag() -> None:
    args = server_args(
        spec(
            gpus={"count": 2},
            memoryPools={"pinnedBytes": "256Mi", "cudaBytesPerGpu": "64Mi"},
            grpc={
                "keepalive": {
                    "timeMs": 7200000,
                    "timeoutMs": 20000,
                    "permitWithoutCalls": False,
                    "http2MaxPingsWithoutData": 2,
                    "http2MinRecvPingIntervalWithoutDataMs": 300000,
                    "http2MaxPingStrikes": 2,
                },
                "maxConnectionAgeMs": 60000,
                "maxConnectionAgeGraceMs": 5000,
            },
            drain={"maxRequestSeconds": 5},
            pythonBackend={"shmDefaultBytes": "4Mi", "shmGrowthBytes": "2Mi"},
            logging={"verbose": 1, "format": "ISO8601"},
            modelLoadThreadCount=4,
            exitTimeoutSeconds=60,
            modelRepository={"uri": "s3://bucket/models"},
            extraArgs=["--rate-limit=execution_count"],
        ),
        control_key="k",
        shm_key="s",
    )
    expected = [
        "--model-repository=s3://bucket/models",
        "--pinned-memory-pool-byte-size=268435456",
        "--cuda-memory-pool-byte-size=0:67108864",
        "--cuda-memory-pool-byte-size=1:67108864",
        "--grpc-keepalive-time=7200000",
        "--grpc-keepalive-timeout=20000",
        "--grpc-keepalive-permit-without-calls=false",
        "--grpc-http2-max-pings-without-data=2",
        "--grpc-http2-min-recv-ping-interval-without-data=300000",
        "--grpc-http2-max-ping-strikes=2",
        "--grpc-max-connection-age=60000",
        "--grpc-max-connection-age-grace=5000",
        "--backend-config=python,shm-default-byte-size=4194304",
        "--backend-config=python,shm-growth-byte-size=2097152",
        "--log-verbose=1",
        "--log-format=ISO8601",
        "--model-load-thread-count=4",
        "--exit-timeout-secs=60",
    ]
    assert [flag for flag in expected if flag not in args] == []
    assert args[-1] == "--rate-limit=execution_count"


# -- /dev/shm ------------------------------------------------------------------------------------


def test_region_grows_as_measured_in_growth_steps() -> None:
    # Measured (bench/RESULTS.md): 25 MiB in + 25 MiB out -> 61 MiB; 25 MiB + 4 B -> 31 MiB; 3 + 3 MiB -> 9 MiB.
    assert region_bytes(50 * MiB, spec()) == 61 * MiB
    assert region_bytes(25 * MiB + 4, spec()) == 32 * MiB  # one step above the measured 31: rounds up
    assert region_bytes(6 * MiB, spec()) == 9 * MiB
    assert region_bytes(0, spec()) == MiB
    assert (
        region_bytes(10 * MiB, spec(pythonBackend={"shmDefaultBytes": "4Mi", "shmGrowthBytes": "8Mi"}))
        == 4 * MiB + 2 * 8 * MiB
    )


def test_execution_bytes_from_fixed_dims_and_unknown_for_variable_ones() -> None:
    config = parse_model_config(BASE_CONFIG)  # 12 FP32 in + 12 FP32 out, batch 8
    assert execution_bytes(config) == (12 * 4 + 12 * 4) * 8
    assert execution_bytes(parse_model_config(VARIABLE_DIMS)) is None
    strings = copy.deepcopy(BASE_CONFIG)
    strings["input"][0]["dataType"] = "TYPE_STRING"
    assert execution_bytes(parse_model_config(strings)) is None


@pytest.mark.parametrize(
    "data_type",
    # keys(), as SIM118 would not have it: iterating a protobuf enum itself fails.
    [name for name in model_config_pb2.DataType.keys() if name != "TYPE_INVALID"],  # noqa: SIM118
)
def test_execution_bytes_count_each_element_as_tritonclient_does(data_type: str) -> None:
    dtype = triton_to_np_dtype(data_type.removeprefix("TYPE_"))
    config = parse_model_config(
        {**BASE_CONFIG, "input": [{"name": "IN", "dataType": data_type, "dims": [3]}], "output": []}
    )
    expected = None if dtype is None or dtype == np.object_ else 3 * np.dtype(dtype).itemsize * config.max_batch_size
    assert execution_bytes(config) == expected


@pytest.mark.parametrize(
    ("groups", "gpus", "expected"),
    [
        ([], 0, 1),
        ([], 2, 2),
        ([{"kind": "KIND_CPU", "count": 3}], 2, 3),
        ([{"kind": "KIND_GPU", "count": 2}], 4, 8),
        ([{"kind": "KIND_GPU", "count": 2, "gpus": [0]}], 4, 2),
        ([{"kind": "KIND_CPU"}, {"kind": "KIND_GPU", "gpus": [0, 1]}], 2, 3),
    ],
)
def test_instance_count_follows_triton(groups: list[dict[str, Any]], gpus: int, expected: int) -> None:
    config = parse_model_config({**BASE_CONFIG, "instanceGroup": groups})
    assert instance_count(config, gpus) == expected


def shm_plan_for(server_spec: TritonServerSpec, models: list[TritonModel]) -> ShmPlan:
    """The /dev/shm plan of a server serving these models, from their shares as plan_fleet sizes it."""
    return shm_plan(server_spec, [model_shm(m, built_model_config(m)[0], server_spec) for m in models])


def test_plan_adds_instances_overlap_pools_and_headroom() -> None:
    big = {
        **BASE_CONFIG,
        "backend": "python",
        "input": [{"name": "x", "dataType": "TYPE_FP32", "dims": [1024, 1024]}],
        "output": [{"name": "y", "dataType": "TYPE_FP32", "dims": [1]}],
        "maxBatchSize": 0,
        "dynamicBatching": None,
        "instanceGroup": [{"kind": "KIND_CPU", "count": 2}],
    }
    big.pop("dynamicBatching")
    python_model = model(big, name="big")
    onnx_model = model(BASE_CONFIG, name="onnx", sharedMemory={"clientPool": {"regions": 4, "regionBytes": "8Mi"}})
    server_spec = spec()
    plan = shm_plan_for(server_spec, [python_model, onnx_model])
    region = region_bytes(4 * MiB + 4, server_spec)  # 1 MiB + 1.2 x (4 MiB + 4 B) -> 6 MiB
    assert region == 6 * MiB
    shares = {share.model: share for share in plan.models}
    assert shares["big"].stub_bytes == 2 * region
    assert shares["onnx"].stub_bytes == 0 and shares["onnx"].client_pool_bytes == 32 * MiB
    assert plan.reload_overlap_bytes == 2 * region
    assert plan.required_bytes == 2 * region + 32 * MiB + 2 * region + 64 * MiB
    assert plan.size_limit_bytes == plan.required_bytes and plan.sufficient


def test_plan_never_goes_below_the_pod_default() -> None:
    plan = shm_plan_for(spec(sharedMemory={"headroom": 0}), [])
    assert plan.required_bytes == FLOOR_BYTES


def test_fixed_size_limit_is_kept_and_reported_insufficient() -> None:
    python_model = model({**BASE_CONFIG, "backend": "python"})
    plan = shm_plan_for(spec(sharedMemory={"sizeLimit": "65Mi"}), [python_model])
    # one 2 MiB region (1 MiB default + one growth step for 768 bytes), its reload overlap, 64 MiB headroom
    assert plan.size_limit_bytes == 65 * MiB and plan.required_bytes == 68 * MiB and not plan.sufficient


def _shm_limit(deployment: dict[str, Any]) -> str:
    [volume] = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "dshm"]
    return volume["emptyDir"]["sizeLimit"]


def test_shm_grows_with_models_but_does_not_shrink_by_itself() -> None:
    """A removed model alone never rolls the pods for a smaller /dev/shm; the next roll for another reason takes it."""
    python = {**BASE_CONFIG, "backend": "python", "instanceGroup": [{"kind": "KIND_CPU", "count": 8}]}
    models = [model(python, name=f"m{index}") for index in range(2)]

    def deployment(server_: TritonServer, served: list[TritonModel], deployed: dict[str, Any] | None) -> dict[str, Any]:
        plan = shm_plan_for(server_.spec, served)
        return deployment_keeping_sizes(server_, plan, None, deployed)

    one = deployment(server(), models[:1], None)
    two = deployment(server(), models, one)
    assert parse_quantity(_shm_limit(two)) > parse_quantity(_shm_limit(one))  # grows: the pods roll for it
    back_to_one = deployment(server(), models[:1], two)
    assert back_to_one == two  # same template: nothing to apply, no restart
    rolled = deployment(server(extraArgs=["--exit-on-error=true"]), models[:1], two)
    assert _shm_limit(rolled) == _shm_limit(
        deployment(server(extraArgs=["--exit-on-error=true"]), models[:1], None)
    )  # rolling anyway: smaller
    assert parse_quantity(_shm_limit(rolled)) < parse_quantity(_shm_limit(two))
    fixed = deployment(server(sharedMemory={"sizeLimit": "1Gi"}), models[:1], two)
    assert _shm_limit(fixed) == "1Gi"  # a size the user set is theirs


# -- config --------------------------------------------------------------------------------------


def test_revision_is_in_the_config_and_changes_with_files_and_config() -> None:
    python_model = model({**BASE_CONFIG, "backend": "python"}, modelName="add_sub")
    one = built_model_config(python_model, {"1/model.py": b"print(1)"})[0]
    two = built_model_config(python_model, {"1/model.py": b"print(2)"})[0]
    assert one.name == "add_sub"
    assert len(config_revision(one)) == 16 and config_revision(one) == one.parameters[REVISION_PARAMETER].string_value
    assert config_revision(one) != config_revision(two)
    assert config_revision(one) == config_revision(built_model_config(python_model, {"1/model.py": b"print(1)"})[0])
    other = model({**BASE_CONFIG, "backend": "python", "maxBatchSize": 16}, modelName="add_sub")
    assert config_revision(built_model_config(other, {"1/model.py": b"print(1)"})[0]) != config_revision(one)


def test_a_config_is_parsed_when_validated_and_not_again_to_render(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = []
    parse = modelconfig.parse_model_config
    monkeypatch.setattr(
        modelconfig, "parse_model_config", lambda data, *path: parsed.append(data) or parse(data, *path)
    )
    python_model = model({**BASE_CONFIG, "backend": "python"}, modelName="add_sub")
    config = built_model_config(python_model)[0]
    assert len(parsed) == 1
    assert config.name == "add_sub" and python_model.spec.parsed_config().name == "", (
        "the validated message is left as parsed"
    )
    assert model({}).spec.parsed_config() == model_config_pb2.ModelConfig(), "a config left out is parsed too"


def test_config_pbtxt_is_printed_once_for_its_revision_the_config_map_and_the_repository(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    printed = []
    print_message = text_format.MessageToString
    monkeypatch.setattr(
        text_format,
        "MessageToString",
        lambda message, **options: printed.append(message) or print_message(message, **options),
    )
    [rendered] = plan_fleet([], [model({**BASE_CONFIG, "backend": "onnxruntime"})]).unbound
    [config_map] = model_config_maps([rendered])
    assert (
        config_map["data"]["config.pbtxt"]
        == rendered.desired.config_pbtxt
        == print_message(rendered.desired.parsed_config())
    )
    assert len([message for message in printed if message.name]) == 1, "the revision's digest needs no print of its own"


def test_a_revision_is_built_once_and_parsed_back_only_for_a_check_that_reads_configs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The value a model renders to is what its ConfigMap, its load and its revision ConfigMap read; a
    pass over kept renderings parses no config (a parse is a live message of some 3 KiB), but on a
    server whose check reads them (NVIDIA's full image chosen: which backends do its models use), once."""
    models = [model({**BASE_CONFIG, "backend": "onnxruntime"}, name=f"m{i}", modelName=f"m{i}") for i in range(3)]
    plain = server(modelRepository={"pvc": {"claimName": "models"}})
    full_image = server(image="nvcr.io/nvidia/tritonserver:25.07-py3")
    kept = {r.model.name: r for r in plan_fleet([plain], models).servers[0].models}
    assert len(kept) == 3
    parses = []
    parse = model_config_pb2.ModelConfig.FromString
    monkeypatch.setattr(
        model_config_pb2.ModelConfig, "FromString", staticmethod(lambda data: parses.append(data) or parse(data))
    )
    fleet = plan_fleet([plain], models, render=lambda model, _server, _files: (kept[model.name], []))
    assert parses == [], "no check on this server reads a config"
    slimmable = plan_fleet([full_image], models, render=lambda model, _server, _files: (kept[model.name], []))
    assert len(parses) == len(kept), "one parse a model for the full image's check"
    assert any(finding.path == "spec.image" for finding in slimmable.findings)
    rendered = fleet.servers[0].models[0]
    assert model_config_maps([rendered])[0]["data"]["config.pbtxt"] == rendered.desired.config_pbtxt
    kept = revision_config_map(rendered.model, rendered.desired)
    assert kept["data"]["config.json"] == rendered.desired.config_json
    assert desired_from_config_map(rendered.name, rendered.revision, kept) == rendered.desired


@pytest.mark.parametrize(
    "parameters",
    [
        {},
        {"a": {"stringValue": "1"}, "zz": {"stringValue": "2"}},
        {REVISION_PARAMETER: {"stringValue": "given"}, "b": {"stringValue": "3"}},
    ],
    ids=["none", "around it", "the revision given"],
)
def test_config_pbtxt_printed_once_is_the_config_printed_and_its_revision_the_digest_of_it_printed_without(
    parameters: dict[str, Any],
) -> None:
    python_model = model({**BASE_CONFIG, "backend": "python", "parameters": parameters}, modelName="add_sub")
    files = {"1/model.py": b"print(1)"}
    config, text = built_model_config(python_model, files)
    assert text == text_format.MessageToString(config)
    without = python_model.spec.parsed_config()
    without.name = "add_sub"
    digest = hashlib.sha256(text_format.MessageToString(without).encode() + files_digest(files).encode()).hexdigest()[
        :16
    ]
    assert config_revision(config) == digest


# -- manifests -----------------------------------------------------------------------------------


KEYS = {manifests.CONTROL_KEY: "key", manifests.SHM_KEY: "shm"}
# The code of the models these tests render (a model comes with its files or from the server's repository).
CODE = {("ml", "m-files"): {"data": {"model.py": "print(1)"}}}


def _render(*documents: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    servers, models, found = parse_resources(documents)
    assert found == []
    fleet = plan_fleet(servers, models, CODE)
    assert fleet.errors == []
    objects = [
        obj for rendered in fleet.servers for obj in server_objects(rendered, KEYS) + model_config_maps(rendered.models)
    ]
    return objects, fleet


def _by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [obj] = [o for o in objects if o["kind"] == kind]
    return obj


SERVER_DOC = {
    "apiVersion": "triton-operator.io/v1alpha1",
    "kind": "TritonServer",
    "metadata": {"name": "triton", "namespace": "ml", "uid": "u-1"},
}


def _server_doc(**spec_fields: Any) -> dict[str, Any]:
    return {**SERVER_DOC, "spec": spec_fields}


def _model_doc(config: dict[str, Any] = BASE_CONFIG, **spec_fields: Any) -> dict[str, Any]:
    files = {"configMapRef": {"name": "m-files", "items": [{"key": "model.py", "path": "1/model.py"}]}}
    document = model_document(config, **{"files": files, **spec_fields})
    document["metadata"] = {"name": "m", "namespace": "ml", "uid": "u-2"}
    return document


FULL_SERVER = dict(
    replicas=3,
    gpus={"count": 2, "resourceName": "nvidia.com/gpu"},
    resources={"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
    pod={
        "labels": {"team": "ml"},
        "annotations": {"a": "b"},
        "nodeSelector": {"gpu": "a100"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
                }
            }
        },
        "imagePullSecrets": [{"name": "registry"}],
        "serviceAccountName": "triton",
        "priorityClassName": "high",
        "runtimeClassName": "nvidia",
        "sidecars": [
            {"name": "client", "image": "example/client:1", "volumeMounts": [{"name": "tmp", "mountPath": "/scratch"}]}
        ],
    },
    service={"type": "LoadBalancer", "annotations": {"x": "y"}, "exposeOutsideCluster": True},
    modelRepository={"pvc": {"claimName": "models", "subPath": "repo"}},
    networkPolicy={
        "inferenceFrom": [
            {"namespaceLabels": {"team": "ml"}, "podLabels": {"role": "client"}},
            {"namespaceLabels": {}},
        ],
        "metricsFrom": [{"podLabels": {"app": "prometheus"}}],
    },
)


@pytest.mark.parametrize(
    "server_spec",
    [
        {},
        FULL_SERVER,
        {"modelRepository": {"uri": "s3://bucket/models", "credentialsSecretRef": {"name": "aws"}}},
        {"modelRepository": {"uri": "gs://bucket/models", "credentialsSecretRef": {"name": "gcp"}}},
        {"modelRepository": {"uri": "as://account/container"}},
    ],
    ids=["defaults", "everything", "s3", "gs", "azure"],
)
def test_every_rendered_object_passes_kubernetes_1_30_strict(server_spec: dict[str, Any]) -> None:
    objects, _ = _render(_server_doc(**server_spec), _model_doc())
    assert {o["kind"] for o in objects} == {"Secret", "Deployment", "Service", "NetworkPolicy", "ConfigMap"}
    assert check_manifests(objects) == []


@pytest.mark.parametrize(
    ("gpus", "node_selector", "rendered"),
    [
        ({"count": 1}, {}, None),
        ({"count": 1}, {"zone": "a"}, {"zone": "a"}),
        ({"count": 1, "product": "NVIDIA-L4"}, {}, {"nvidia.com/gpu.product": "NVIDIA-L4"}),
        ({"count": 2, "product": "NVIDIA-L4"}, {"zone": "a"}, {"nvidia.com/gpu.product": "NVIDIA-L4", "zone": "a"}),
        (
            {"count": 1, "product": "NVIDIA-L4"},
            {"nvidia.com/gpu.product": "Tesla-T4"},
            {"nvidia.com/gpu.product": "Tesla-T4"},
        ),
    ],
    ids=["no-product", "users-only", "product-only", "merged", "users-key-wins"],
)
def test_the_gpu_product_is_a_node_selector_under_the_users_own(
    gpus: dict[str, Any], node_selector: dict[str, str], rendered: dict[str, str] | None
) -> None:
    objects, _ = _render(_server_doc(gpus=gpus, pod={"nodeSelector": node_selector}), _model_doc())
    assert _by_kind(objects, "Deployment")["spec"]["template"]["spec"].get("nodeSelector") == rendered
    assert check_manifests(objects) == []


# -- NetworkPolicy ---------------------------------------------------------------------------------


def _ingress_by_ports(policy: dict[str, Any]) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    return {tuple(p["port"] for p in rule["ports"]): rule["from"] for rule in policy["spec"]["ingress"]}


def test_network_policy_admits_inference_from_the_namespace_control_from_the_operator_metrics_from_monitoring() -> None:
    objects, _ = _render(_server_doc(), _model_doc())
    policy = _by_kind(objects, "NetworkPolicy")
    assert (
        policy["metadata"]["namespace"] == "ml" and policy["metadata"]["ownerReferences"][0]["kind"] == "TritonServer"
    )
    assert policy["spec"]["podSelector"] == {
        "matchLabels": _by_kind(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    }
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    operator = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "triton-operator"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "triton-operator"}},
    }
    assert _ingress_by_ports(policy) == {
        ("http", "grpc"): [{"podSelector": {}}],  # a pod selector alone: the server's own namespace
        ("grpc",): [operator],
        ("metrics",): [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}, "podSelector": {}}
        ],
    }
    container_ports = {
        p["name"] for p in _by_kind(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    assert {port for ports in _ingress_by_ports(policy) for port in ports} == container_ports


def test_network_policy_peers_come_from_the_spec_and_the_operator_from_its_settings() -> None:
    servers, models, _ = parse_resources([_server_doc(**FULL_SERVER), _model_doc()])
    [rendered] = plan_fleet(servers, models, CODE).servers
    where = NetworkPeer(namespace_labels={"kubernetes.io/metadata.name": "ops"}, pod_labels={"app": "op"})
    policy = _by_kind(server_objects(rendered, KEYS, operator=where), "NetworkPolicy")
    assert _ingress_by_ports(policy) == {
        ("http", "grpc"): [
            {"namespaceSelector": {"matchLabels": {"team": "ml"}}, "podSelector": {"matchLabels": {"role": "client"}}},
            {"namespaceSelector": {}, "podSelector": {}},  # every namespace
        ],
        ("grpc",): [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
                "podSelector": {"matchLabels": {"app": "op"}},
            }
        ],
        ("metrics",): [{"podSelector": {"matchLabels": {"app": "prometheus"}}}],
    }


def test_an_empty_peer_list_lets_nobody_in_rather_than_everybody() -> None:
    """A rule without `from` admits every source: a port nobody may reach gets no rule at all."""
    objects, _ = _render(_server_doc(networkPolicy={"inferenceFrom": [], "metricsFrom": []}), _model_doc())
    assert list(_ingress_by_ports(_by_kind(objects, "NetworkPolicy"))) == [("grpc",)]


def test_network_policy_can_be_turned_off() -> None:
    objects, _ = _render(_server_doc(networkPolicy={"enabled": False}), _model_doc())
    assert "NetworkPolicy" not in {o["kind"] for o in objects}


def test_each_key_has_its_own_secret_and_environment_variable() -> None:
    """The sidecars' key is another Secret than the operator's, so a sidecar can be given it alone."""
    objects, _ = _render(_server_doc(), _model_doc())
    secrets = {o["metadata"]["name"]: o["data"] for o in objects if o["kind"] == "Secret"}
    assert secrets == {"triton-control": {"control-key": "a2V5"}, "triton-shm": {"shm-key": "c2ht"}}
    env = _by_kind(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e for e in env if "secretKeyRef" in e.get("valueFrom", {})] == [
        {
            "name": "TRITON_OPERATOR_CONTROL_KEY",
            "valueFrom": {"secretKeyRef": {"name": "triton-control", "key": "control-key"}},
        },
        {"name": "TRITON_SHM_KEY", "valueFrom": {"secretKeyRef": {"name": "triton-shm", "key": "shm-key"}}},
    ]


def test_every_object_of_a_varied_fleet_passes_kubernetes_1_30_strict() -> None:
    """`validate` and `render` check only what a server passes to its pod as written: the rest of what
    they write must be valid by construction, for every backend, batching kind and kind of server."""
    documents = varied_fleet(40)
    config_maps = {("default", d["metadata"]["name"]): d for d in documents if d["kind"] == "ConfigMap"}
    servers, models, found = parse_resources([d for d in documents if d["kind"] != "ConfigMap"])
    fleet = plan_fleet(servers, models, config_maps, earlier=found)
    assert fleet.errors == [] and len(fleet.servers) == 6
    assert (
        check_manifests(
            obj
            for rendered in fleet.servers
            for obj in server_objects(rendered, KEYS) + model_config_maps(rendered.models)
        )
        == []
    )


def _opaque_fields(schema: dict[str, Any], path: str = "") -> list[str]:
    """The fields of a structural schema that the API server keeps as written (no schema of their own)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return [path]
    children = [(f"{path}.{name}" if path else name, child) for name, child in schema.get("properties", {}).items()]
    return [field for child_path, child in children for field in _opaque_fields(child.get("items", child), child_path)]


def test_every_kubernetes_object_a_server_passes_through_is_known_to_the_check() -> None:
    """A new opaque field of the server must join TritonServerSpec.kubernetes_objects, or the CLI would
    not check it against the Kubernetes schema."""
    claims = {"requests": {"memory": "1Gi"}, "claims": [{"name": "gpu"}]}
    everything = spec(
        resources=claims,
        pod={
            **FULL_SERVER["pod"],
            "securityContext": {"runAsUser": 1000},
            "containerSecurityContext": {"runAsUser": 1000},
        },
    )
    assert sorted(everything.kubernetes_objects()) == sorted(_opaque_fields(structural_schema(TritonServerSpec)))
    assert spec(pod={"tolerations": [], "annotations": {"a": "b"}}).kubernetes_objects() == {}


def test_an_invalid_pod_override_is_caught_by_the_kubernetes_schema() -> None:
    objects, _ = _render(_server_doc(pod={"tolerations": [{"key": "k", "effectt": "NoSchedule"}]}))
    [finding] = check_manifests(objects)
    assert (
        finding.where.startswith("Deployment/ml/triton: spec.template.spec.tolerations")
        and "effectt" in finding.message
    )


def test_pod_has_what_triton_needs() -> None:
    objects, fleet = _render(_server_doc(**FULL_SERVER), _model_doc({**BASE_CONFIG, "backend": "python"}))
    deployment = _by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    triton, sidecar = pod["containers"]
    shm = fleet.servers[0].shm.size_limit_bytes
    dshm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert dshm["emptyDir"]["medium"] == "Memory" and parse_quantity(dshm["emptyDir"]["sizeLimit"]) == shm
    assert parse_quantity(triton["resources"]["requests"]["memory"]) == 4 * 1024 * MiB + shm
    assert parse_quantity(triton["resources"]["limits"]["memory"]) == 8 * 1024 * MiB + shm
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert {"name": "tmp", "mountPath": "/tmp"} in triton["volumeMounts"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in triton["volumeMounts"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in sidecar["volumeMounts"]
    assert triton["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert pod["readinessGates"] == [{"conditionType": "triton-operator.io/models-ready"}]
    assert pod["terminationGracePeriodSeconds"] > 30
    assert (
        pod["securityContext"]["runAsNonRoot"] is True and triton["securityContext"]["readOnlyRootFilesystem"] is True
    )
    assert triton["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "--cuda-memory-pool-byte-size=1:67108864" not in triton["args"]
    key_env = next(e for e in triton["env"] if e["name"] == manifests.CONTROL_KEY.env)
    assert key_env["valueFrom"]["secretKeyRef"]["name"] == "triton-control"
    assert any(f"$({manifests.CONTROL_KEY.env})" in a for a in triton["args"])
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert deployment["spec"]["template"]["metadata"]["labels"]["team"] == "ml"


def test_config_map_holds_the_rendered_config() -> None:
    objects, fleet = _render(_server_doc(), _model_doc())
    config_map = _by_kind(objects, "ConfigMap")
    rendered = fleet.servers[0].models[0]
    assert config_map["metadata"]["name"] == "m-config"
    assert config_map["metadata"]["ownerReferences"][0]["kind"] == "TritonModel"
    assert config_map["data"]["config.pbtxt"].startswith('name: "m"\n')
    assert config_map["metadata"]["annotations"][REVISION_PARAMETER] == config_revision(
        rendered.desired.parsed_config()
    )


def test_gs_credentials_are_mounted_and_s3_ones_are_env() -> None:
    gs, _ = _render(_server_doc(modelRepository={"uri": "gs://b/m", "credentialsSecretRef": {"name": "gcp"}}))
    container = _by_kind(gs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert any(e["name"] == "GOOGLE_APPLICATION_CREDENTIALS" for e in container["env"])
    s3, _ = _render(_server_doc(modelRepository={"uri": "s3://b/m", "credentialsSecretRef": {"name": "aws"}}))
    container = _by_kind(s3, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["envFrom"] == [{"secretRef": {"name": "aws"}}]


def test_rendering_twice_gives_the_same_objects() -> None:
    assert _render(_server_doc(**FULL_SERVER), _model_doc())[0] == _render(_server_doc(**FULL_SERVER), _model_doc())[0]


def test_inline_server_renders_a_child_triton_server_owned_by_the_model() -> None:
    document = _model_doc()
    document["spec"] = {
        "server": {"replicas": 2, "modelRepository": {"uri": "s3://models/m"}},
        "config": BASE_CONFIG,
    }
    objects, _ = _render(document)
    child = _by_kind(objects, "TritonServer")
    assert child["metadata"]["name"] == "m" and child["metadata"]["ownerReferences"][0]["uid"] == "u-2"
    assert child["spec"] == {"replicas": 2, "modelRepository": {"uri": "s3://models/m"}}
    assert check_manifests(objects) == []


def test_a_model_binds_to_an_inline_server_declared_by_a_model_listed_after_it() -> None:
    owner = TritonModel.model_validate(
        model_document(BASE_CONFIG)
        | {
            "metadata": {"name": "z-server", "namespace": "ml", "uid": "u-3"},
            "spec": {"server": {"modelRepository": {"uri": "s3://models/z"}}, "config": BASE_CONFIG},
        }
    )
    early = model(BASE_CONFIG, name="a-model", serverRef={"name": "z-server"})
    for order in ([early, owner], [owner, early]):
        fleet = plan_fleet([], order)
        assert [sorted(r.model.name for r in rendered.models) for rendered in fleet.servers] == [
            ["a-model", "z-server"]
        ]
        assert fleet.unbound == [] and fleet.errors == []


@pytest.mark.parametrize(
    ("fields", "grace_ms"),
    [
        ({}, 120_000),
        ({"drain": {"maxRequestSeconds": 30}}, 30_000),
        ({"grpc": {"maxConnectionAgeGraceMs": 300_000}}, 300_000),
        ({"grpc": {"maxConnectionAgeGraceMs": 5000}, "drain": {"maxRequestSeconds": 5}}, 5000),
    ],
    ids=["default", "short-requests", "set-longer", "set-with-short-requests"],
)
def test_a_recycled_connection_carries_the_longest_request_to_its_end(fields: dict[str, Any], grace_ms: int) -> None:
    """The connection-age grace is the longest request unless set: a stream cut at the grace is cut on
    every pod at every age, not only while one drains."""
    assert drain.connection_age_grace_ms(spec(**fields)) == grace_ms


@pytest.mark.parametrize(
    ("fields", "pre_stop"),
    [
        ({}, 5 + 11 + 120),
        ({"drain": {"endpointsPropagationSeconds": 10}}, 10 + 11 + 120),
        ({"drain": {"maxRequestSeconds": 10}}, 5 + 11 + 10),
        (
            {"grpc": {"maxConnectionAgeMs": 2500, "maxConnectionAgeGraceMs": 1000}, "drain": {"maxRequestSeconds": 1}},
            5 + 4,
        ),  # 2.75 + 1, up
        ({"grpc": {"maxConnectionAgeGraceMs": 200_000}}, 5 + 11 + 200),
        ({"grpc": {"maxConnectionAgeMs": 0}}, 5 + 120),
        ({"grpc": {"maxConnectionAgeMs": 0}, "drain": {"maxRequestSeconds": 10}}, 5 + 10),
        ({"drain": {"preStopSeconds": 0}}, 0),
        ({"drain": {"preStopSeconds": 40}}, 40),
    ],
    ids=[
        "default",
        "slow-endpoints",
        "short-requests",
        "short-age",
        "grace-set",
        "no-age",
        "no-age-short-requests",
        "no-delay",
        "set-by-hand",
    ],
)
def test_a_pod_is_stopped_once_its_last_connection_has_moved_and_its_last_request_ended(
    fields: dict[str, Any], pre_stop: int
) -> None:
    """preStop: the endpoints' propagation, then the latest a connection opened before it gets its
    GOAWAY (the age and gRPC's 10% jitter), then that connection's grace; with the age off, the
    longest request."""
    assert drain.pre_stop_seconds(spec(**fields)) == pre_stop


@pytest.mark.parametrize(
    ("fields", "grace"),
    [
        ({}, 136 + 30 + 15),
        ({"exitTimeoutSeconds": 5, "drain": {"maxRequestSeconds": 10}}, 26 + 5 + 15),
        ({"drain": {"preStopSeconds": 0}}, 30 + 15),
    ],
    ids=["default", "short", "no-delay"],
)
def test_the_grace_period_outlasts_pre_stop_and_the_exit_timeout(fields: dict[str, Any], grace: int) -> None:
    assert drain.termination_grace_seconds(spec(**fields)) == grace


@pytest.mark.parametrize(
    ("fields", "age_flags"),
    [
        ({}, ["--grpc-max-connection-age=10000", "--grpc-max-connection-age-grace=120000"]),
        (
            {"grpc": {"maxConnectionAgeMs": 2500, "maxConnectionAgeGraceMs": 1000}, "drain": {"maxRequestSeconds": 1}},
            ["--grpc-max-connection-age=2500", "--grpc-max-connection-age-grace=1000"],
        ),
        ({"grpc": {"maxConnectionAgeMs": 0}}, []),
        (
            {"drain": {"preStopSeconds": 0}},
            ["--grpc-max-connection-age=10000", "--grpc-max-connection-age-grace=120000"],
        ),
    ],
    ids=["default", "short-age", "no-age", "no-delay"],
)
def test_a_pod_drains_before_triton_stops(fields: dict[str, Any], age_flags: list[str]) -> None:
    """The rules reach the pod: the age flags, the preStop sleep (none at 0) and the grace period."""
    server = TritonServer.model_validate(
        {"apiVersion": "triton-operator.io/v1alpha1", "kind": "TritonServer", "metadata": {"name": "t"}, "spec": fields}
    )
    [rendered] = plan_fleet([server], []).servers
    pod = deployment(server, rendered.shm, rendered.memory)["spec"]["template"]["spec"]
    [triton] = pod["containers"]
    pre_stop = drain.pre_stop_seconds(server.spec)
    assert pod["terminationGracePeriodSeconds"] == drain.termination_grace_seconds(server.spec)
    assert triton.get("lifecycle") == (
        {"preStop": {"exec": {"command": ["sleep", str(pre_stop)]}}} if pre_stop else None
    )
    assert [a for a in triton["args"] if a.startswith("--grpc-max-connection-age")] == age_flags
    assert check_manifests([deployment(server, rendered.shm, rendered.memory)]) == []


# -- The memory sidecar (spec.memoryReader) --------------------------------------------------------


def test_the_memory_sidecar_is_in_the_pod_only_when_asked_and_the_operator_may_reach_it() -> None:
    objects, _ = _render(
        _server_doc(memoryReader={"enabled": True, "image": "registry.example/triton-operator:1"}), _model_doc()
    )
    pod = _by_kind(objects, "Deployment")["spec"]["template"]["spec"]
    triton, reader = pod["containers"]
    assert pod["shareProcessNamespace"] is True  # its /proc holds Triton's stubs
    assert reader["image"] == "registry.example/triton-operator:1" and reader["command"] == [
        "triton-operator",
        "memory-sidecar",
        "--port=8003",
    ]
    assert reader["securityContext"] == RESTRICTED_CONTAINER_SECURITY_CONTEXT
    assert ("grpc", "memory") in _ingress_by_ports(_by_kind(objects, "NetworkPolicy"))
    assert check_manifests(objects) == []
    without, _ = _render(_server_doc(), _model_doc())
    pod = _by_kind(without, "Deployment")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == [triton["name"]] and "shareProcessNamespace" not in pod
    assert ("grpc",) in _ingress_by_ports(_by_kind(without, "NetworkPolicy"))
