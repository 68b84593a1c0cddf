"""A TritonModel's own server (spec.server) takes sizes, resources and model settings only: whatever else
shapes the pod (its image, Triton's flags, containers, service account and token, security contexts,
scheduling, labels, volumes, Secrets, Service and NetworkPolicy) is a TritonServer's. Where TritonModels
are granted more widely than Deployments, an inline server would otherwise be a Deployment of the model
author's choosing. Refused by validate (naming the field, pointing at a TritonServer) and by the CRD."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.crd_check import crd_errors
from tests.support.resources import BASE_CONFIG, server_document
from triton_operator.api.parse import parse_resources
from triton_operator.api.server import TritonServerSpec
from triton_operator.render.fleet import plan_fleet

REPOSITORY = {"modelRepository": {"uri": "s3://models/m"}}


def _model(**server: Any) -> dict[str, Any]:
    return {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonModel",
        "metadata": {"name": "m", "namespace": "default"},
        "spec": {"server": server, "config": BASE_CONFIG},
    }


# A TritonServer's field, a value, and the field path a model's inline server is refused at.
SERVER_ONLY = [
    ({"image": "registry.example/anything:1", **REPOSITORY}, "spec.server.image"),
    ({"extraArgs": ["--log-file=/tmp/t.log"], **REPOSITORY}, "spec.server.extraArgs"),
    ({"pod": {"serviceAccountName": "deployer"}, **REPOSITORY}, "spec.server.pod"),
    ({"pod": {"automountServiceAccountToken": True}, **REPOSITORY}, "spec.server.pod"),
    ({"pod": {"securityContext": {"fsGroup": 2000}}, **REPOSITORY}, "spec.server.pod"),
    (
        {
            "pod": {"sidecars": [{"name": "s", "image": "busybox"}]},
            **REPOSITORY,
        },
        "spec.server.pod",
    ),
    ({"pod": {"labels": {"app": "payments"}}, **REPOSITORY}, "spec.server.pod"),
    ({"pod": {"tolerations": [{"operator": "Exists"}]}, **REPOSITORY}, "spec.server.pod"),
    ({"service": {"type": "LoadBalancer", "exposeOutsideCluster": True}, **REPOSITORY}, "spec.server.service"),
    ({"networkPolicy": {"enabled": False}, **REPOSITORY}, "spec.server.networkPolicy"),
    ({"modelRepository": {"pvc": {"claimName": "other-team", "readOnly": False}}}, "spec.server.modelRepository.pvc"),
    (
        {"modelRepository": {"uri": "s3://models/m", "credentialsSecretRef": {"name": "database"}}},
        "spec.server.modelRepository.credentialsSecretRef",
    ),
    (
        {"memoryReader": {"enabled": True, "image": "registry.example/anything:1"}, **REPOSITORY},
        "spec.server.memoryReader.image",
    ),
]


@pytest.mark.parametrize(("server", "path"), SERVER_ONLY, ids=[str(server) for server, _ in SERVER_ONLY])
def test_what_shapes_the_pod_is_refused_in_a_models_inline_server(server: dict[str, Any], path: str) -> None:
    document = _model(**server)
    servers, models, found = parse_resources([document])
    assert servers == models == []
    assert [f.where for f in found] == [f"TritonModel/default/m: {path}"]
    assert "use a TritonServer (serverRef) for this" in found[0].message
    assert crd_errors(document), "the API server would take it"


@pytest.mark.parametrize(("server", "path"), SERVER_ONLY, ids=[str(server) for server, _ in SERVER_ONLY])
def test_a_triton_server_takes_the_same_fields(server: dict[str, Any], path: str) -> None:
    document = server_document(**server)
    assert parse_resources([document])[2] == []
    assert crd_errors(document) == []


def test_an_inline_server_takes_sizes_resources_and_model_settings() -> None:
    server = {
        "replicas": 2,
        "backends": ["onnxruntime"],
        "modelRepository": {"uri": "s3://models/m"},
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
        "gpus": {"count": 1, "product": "NVIDIA-L4"},
        "capacity": {"memory": "6Gi"},
        "memoryPools": {"pinnedBytes": "64Mi"},
        "grpc": {"maxConnectionAgeMs": 0},
        "pythonBackend": {"shmDefaultBytes": "2Mi"},
        "sharedMemory": {"sizeLimit": "auto"},
        "logging": {"verbose": 1},
        "modelLoadThreadCount": 2,
        "exitTimeoutSeconds": 10,
        "drain": {"maxRequestSeconds": 30},
        "memoryReader": {"enabled": True},
        "rollout": {"strategy": "AllAtOnce"},
    }
    document = _model(**server)
    servers, models, found = parse_resources([document])
    assert found == [] and crd_errors(document) == []
    [rendered] = plan_fleet(servers, models).servers
    assert rendered.server.spec == TritonServerSpec.model_validate(server)
    assert rendered.server.spec.image == "nvcr.io/nvidia/tritonserver:25.07-py3"  # the operator's, not the author's


def test_a_model_author_gets_no_deployment_of_their_choosing() -> None:
    """The escalation itself: a model whose inline server asks for a root pod with a privileged sidecar, a
    service account and its token, in an image of its choosing, makes no Deployment at all."""
    document = _model(
        image="registry.example/anything:1",
        pod={
            "serviceAccountName": "deployer",
            "automountServiceAccountToken": True,
            "securityContext": {"runAsUser": 0, "runAsNonRoot": False},
            "sidecars": [{"name": "shell", "image": "busybox", "securityContext": {"privileged": True}}],
        },
        **REPOSITORY,
    )
    servers, models, found = parse_resources([document])
    fleet = plan_fleet(servers, models, earlier=found)
    assert fleet.servers == [] and fleet.errors
    assert sorted(f.path for f in fleet.errors) == ["spec.server.image", "spec.server.pod"]
