"""The chart grants exactly what the operator uses: every API call the operator (kopf included)
makes in a scenario on the emulated API server, held against the RBAC rules `helm template`
renders, in both modes. Nothing missing, nothing extra; a wildcard could only show up as extra.

The scenario reaches every call site of the operator's API client (triton_operator/k8s/api.py)
and of kopf, each on a path the test waits for:

- KeySecrets.keys: get each key's Secret (control, shm), create it when missing. On a 409 (created meanwhile)
  it gets it again; after a resync it gets it again and creates a deleted one with the key held:
  the same two verbs. A rotate annotation patches it with a new key. Secrets are never listed or
  watched (that would read every Secret in scope).
- Children.apply: what holds a child's name is read first (get; ConfigMaps and TritonServers from
  the watches); a free name is created, the operator's own object patched by server-side apply.
  The Deployment and Service are patched after a TritonServer edit, the config ConfigMap after a
  TritonModel config edit, an inline server's TritonServer after an edit of the model's `server:`.
- ConfigMapFiles: a files ConfigMap made before the model that names it is read (get).
- Children gets the Deployment once (to keep its /dev/shm size, and to compare the key its pods
  were started with).
- KubernetesApi.patch_status of both kinds; set_pod_condition (pods/status) on a pod whose Triton
  answers (a real tritonserver: a pod that does not answer keeps its condition as it was). ConfigMaps
  holding model files are only read, from kopf's watch.
- The pods' owner chain (k8s/watch/indexes.py Indexes.pods_of): Deployments and ReplicaSets labelled as the
  operator's are listed and watched (kopf) for their controllers.
- kopf: list and watch of each served resource, of CustomResourceDefinitions and, in the
  namespaced mode, of Namespaces; Events for an invalid spec and for a deletion released by the
  finalizer timeout.
- Finalizer (triton_operator/k8s/watch/finalizer.py): the TritonModel finalizer added and taken away (patch).
- Autoscaling (triton_operator/k8s/server/autoscaler_upkeep.py): the HPA of spec.autoscaling is applied (patch,
  and create), read for the status (get); another engine deletes it and applies a ScaledObject; no
  autoscaling deletes that (delete). KEDA's own HPA is read as the operator's is: the same get.
- NetworkPolicy (Children.remove_unwanted_policy): read before it is written (get), made (create),
  changed with the spec (patch); turned off in the spec, deleted (delete).
- KubernetesApi.request repeats a call after a 401 with new credentials: no verb of its own.
- Leader election (triton_operator/k8s/election/lease.py), as the chart runs it, on its Lease in the release
  namespace: get it, create it (it is not there yet), patch it to renew (the scenario lasts many
  retry periods) and to release it when the operator stops. A takeover is the same patch.
The operator deletes nothing else (what it creates is owned, and garbage-collected) and never updates (PUT).
"""

from __future__ import annotations

import asyncio
import copy
from collections import defaultdict
from typing import Any

import pytest

from tests.support.chart import render
from tests.support.cluster import ApiCall, api_call
from tests.support.election import elected_operator
from tests.support.operator import NAMESPACE, Cluster, Pods, api_server
from tests.support.ports import free_ports
from tests.support.resources import FILES, MODEL, SERVER

# A model with a server of its own, which the operator creates as a TritonServer named after it.
SOLO_MODEL = {
    "apiVersion": "triton-operator.io/v1alpha1",
    "kind": "TritonModel",
    "metadata": {"name": "solo"},
    "spec": {"server": {"replicas": 1}, "config": MODEL["spec"]["config"], "files": MODEL["spec"]["files"]},
}

# Resource key: (where it is granted: "cluster" or a namespace, apiGroup, resource[/subresource]).
Grants = dict[tuple[str, str, str], set[str]]

MODES = {
    "cluster-wide": [],
    "namespaced": ["--set", "rbac.clusterWide=false", "--set", f"watchNamespaces={{{NAMESPACE}}}"],
}


def granted(objects: list[dict[str, Any]]) -> Grants:
    """The verbs each binding gives the operator, per resource: ClusterRoleBindings cluster-wide,
    RoleBindings in their namespace."""
    roles = {
        (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]): obj["rules"]
        for obj in objects
        if obj["kind"] in ("ClusterRole", "Role")
    }
    grants: Grants = defaultdict(set)
    for binding in (obj for obj in objects if obj["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        scope = "cluster" if binding["kind"] == "ClusterRoleBinding" else binding["metadata"]["namespace"]
        ref = binding["roleRef"]
        for rule in roles[
            (ref["kind"], binding["metadata"]["namespace"] if ref["kind"] == "Role" else "", ref["name"])
        ]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    grants[(scope, group, resource)].update(rule["verbs"])
    return dict(grants)


# The namespace the chart is rendered into (tests/support/chart.py), where the operator runs and keeps its Lease.
RELEASE_NAMESPACE = "triton-system"


def needed(calls: list[ApiCall], cluster_wide: bool) -> Grants:
    """The least grant for these calls: cluster-wide mode grants everything through ClusterRoles; the
    namespaced mode grants a namespace's calls in that namespace, and only cluster-scoped calls
    (a URL without a namespace: CRDs, Namespaces) through a ClusterRole. In both, calls in the
    operator's own namespace (its Lease) are granted there only."""
    grants: Grants = defaultdict(set)
    for call in calls:
        own = call.namespace == RELEASE_NAMESPACE
        scope = "cluster" if (cluster_wide and not own) or call.namespace is None else call.namespace
        grants[(scope, call.group, call.resource)].add(call.verb)
    return dict(grants)


async def exercise_the_operator(cluster: Cluster, pods: Pods) -> None:
    """Create, edit, fail, and delete through the finalizer, waiting for each outcome."""
    await cluster.create(copy.deepcopy(FILES))
    await cluster.create(copy.deepcopy(SERVER))
    await cluster.wait(
        "the server's Secret", lambda: cluster.get("Secret", "triton-control")
    )  # the files ConfigMap is indexed by then, unread
    await cluster.create(copy.deepcopy(MODEL))
    await cluster.wait(
        "the server's children",
        lambda: all(
            cluster.get(k, n)
            for k, n in [
                ("Deployment", "triton"),
                ("Service", "triton"),
                ("Secret", "triton-control"),
                ("ConfigMap", "add-config"),
            ]
        ),
    )

    # A pod whose Triton loads the model: its readinessGate condition is set. A pod whose Triton never
    # answers (nothing listens at its port) is only reported in the server's status (it never joined).
    triton = await asyncio.to_thread(pods.start, "triton-a", cluster.control_key("triton"))
    await cluster.add_pod("triton", "triton-a", triton.address, triton.ports.grpc)
    await cluster.wait(
        "the pod in service", lambda: (cluster.pod_condition("triton-a") or {}).get("status") == "True", timeout=60
    )
    [closed_port] = free_ports(1)
    await cluster.add_pod("triton", "triton-b", "127.0.0.1", closed_port)

    def silent_pod_reported() -> bool:
        models_ready = cluster.condition("TritonServer", "triton", "ModelsReady") or {}
        return "not answering the control API: triton-b" in models_ready.get("message", "")

    await cluster.wait("the silent pod reported", silent_pod_reported)

    # Edits re-apply what the operator owns: the config ConfigMap, then the Deployment and Service.
    config = cluster.get("ConfigMap", "add-config")["data"]
    await cluster.patch(
        "TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": 200}}}}
    )
    await cluster.wait("the new config.pbtxt", lambda: cluster.get("ConfigMap", "add-config")["data"] != config)
    await cluster.patch("TritonServer", "triton", {"spec": {"replicas": 2, "service": {"annotations": {"team": "ml"}}}})
    await cluster.wait("the Deployment scaled", lambda: cluster.get("Deployment", "triton")["spec"]["replicas"] == 2)
    await cluster.wait(
        "the Service annotated",
        lambda: cluster.get("Service", "triton")["metadata"].get("annotations", {}).get("team") == "ml",
    )

    # Canary rollouts keep the last two stable revisions in ConfigMaps; a third deletes the oldest.
    def rollout() -> dict[str, Any]:
        return (cluster.get("TritonModel", "add").get("status") or {}).get("rollout") or {}

    await cluster.patch(
        "TritonModel", "add", {"spec": {"rollout": {"strategy": "Canary", "bakeSeconds": 0, "minRequests": 0}}}
    )
    first = await cluster.wait(
        "the first revision kept",
        lambda: (
            rollout()
            and cluster.get("ConfigMap", f"add-revision-{rollout()['stableRevision']}")
            and rollout()["stableRevision"]
        ),
    )
    stable = first
    for delay in (300, 400):
        await cluster.patch(
            "TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": delay}}}}
        )
        stable = await cluster.wait(
            "the new revision promoted",
            lambda: (
                rollout().get("phase") == "Stable"
                and rollout()["stableRevision"] != stable
                and rollout()["stableRevision"]
            ),
        )
    await cluster.wait(
        "the oldest kept revision deleted", lambda: cluster.get("ConfigMap", f"add-revision-{first}") is None
    )

    # Autoscaling: an HPA applied and read; another engine deletes it for a ScaledObject; none deletes that.
    await cluster.patch("TritonServer", "triton", {"spec": {"autoscaling": {"maxReplicas": 3}}})
    await cluster.wait(
        "the HPA read",
        lambda: (
            cluster.get("HorizontalPodAutoscaler", "triton")
            and (cluster.get("TritonServer", "triton").get("status") or {}).get("autoscaling")
        ),
    )
    await cluster.patch(
        "TritonServer", "triton", {"spec": {"autoscaling": {"maxReplicas": 4}}}
    )  # made by a create, changed by a patch
    await cluster.wait(
        "the HPA changed", lambda: cluster.get("HorizontalPodAutoscaler", "triton")["spec"]["maxReplicas"] == 4
    )
    keda = {
        "engine": "keda",
        "maxReplicas": 3,
        "keda": {"serverAddress": "http://prometheus-operated.monitoring.svc:9090"},
    }
    await cluster.patch("TritonServer", "triton", {"spec": {"autoscaling": keda}})
    await cluster.wait(
        "the HPA replaced",
        lambda: cluster.get("ScaledObject", "triton") and cluster.get("HorizontalPodAutoscaler", "triton") is None,
    )
    await cluster.patch("TritonServer", "triton", {"spec": {"autoscaling": {"maxReplicas": 4}}})
    await cluster.wait(
        "the ScaledObject changed", lambda: cluster.get("ScaledObject", "triton")["spec"]["maxReplicaCount"] == 4
    )
    await cluster.patch("TritonServer", "triton", {"spec": {"autoscaling": None}})
    await cluster.wait("the ScaledObject deleted", lambda: cluster.get("ScaledObject", "triton") is None)

    # The NetworkPolicy: made with the other children (create), changed with the spec (patch), turned off (delete).
    await cluster.wait("the NetworkPolicy", lambda: cluster.get("NetworkPolicy", "triton"))
    await cluster.patch(
        "TritonServer", "triton", {"spec": {"networkPolicy": {"metricsFrom": [{"podLabels": {"app": "prometheus"}}]}}}
    )
    await cluster.wait(
        "the NetworkPolicy changed",
        lambda: "prometheus" in str((cluster.get("NetworkPolicy", "triton") or {}).get("spec")),
    )
    await cluster.patch("TritonServer", "triton", {"spec": {"networkPolicy": {"enabled": False}}})
    await cluster.wait("the NetworkPolicy deleted", lambda: cluster.get("NetworkPolicy", "triton") is None)
    # A rotate annotation: a new key in the Secret (patch).
    key = cluster.control_key("triton")
    await cluster.patch(
        "TritonServer", "triton", {"metadata": {"annotations": {"triton-operator.io/rotate-control-key": "1"}}}
    )
    await cluster.wait("the key rotated", lambda: cluster.control_key("triton") != key)

    # An invalid spec is reported as a Warning Event.
    await cluster.patch("TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"preferredBatchSize": [32]}}}})
    await cluster.wait("the InvalidSpec Event", lambda: any(e["reason"] == "InvalidSpec" for e in cluster.all("Event")))

    # A model with its own server: the operator creates that TritonServer, and patches it on an edit.
    await cluster.create(copy.deepcopy(SOLO_MODEL))
    await cluster.wait("the inline server", lambda: cluster.get("TritonServer", "solo"))
    await cluster.patch("TritonModel", "solo", {"spec": {"server": {"replicas": 3}}})
    await cluster.wait(
        "the inline server edited", lambda: cluster.get("TritonServer", "solo")["spec"].get("replicas") == 3
    )

    # Deleted while a pod never answers: the finalizer holds it, then lets it go with a Warning Event.
    await cluster.delete("TritonModel", "add")
    await cluster.wait("the model released", lambda: cluster.get("TritonModel", "add") is None)
    await cluster.wait(
        "the UnloadTimedOut Event", lambda: any(e["reason"] == "UnloadTimedOut" for e in cluster.all("Event"))
    )


@pytest.mark.triton
@pytest.mark.parametrize("mode", MODES)
async def test_the_chart_grants_exactly_the_calls_the_operator_makes(mode: str, pods: Pods) -> None:
    cluster_wide = mode == "cluster-wide"
    async with api_server() as cluster:
        namespaces = [] if cluster_wide else [NAMESPACE]
        async with elected_operator(
            cluster, namespaces, lease_namespace=RELEASE_NAMESPACE, read_timeout_seconds=1, finalizer_timeout_seconds=1
        ):
            await exercise_the_operator(cluster, pods)
        calls = cluster.operator_calls()
    assert granted(render(*MODES[mode])) == needed(calls, cluster_wide)


@pytest.mark.parametrize(
    "method, path, params, call",
    [
        (
            "GET",
            "/apis/triton-operator.io/v1alpha1/tritonmodels",
            {},
            ApiCall("list", "triton-operator.io", "tritonmodels", None),
        ),
        ("GET", "/api/v1/namespaces/ml/pods", {"watch": "true"}, ApiCall("watch", "", "pods", "ml")),
        ("GET", "/apis/apps/v1/namespaces/ml/deployments/triton", {}, ApiCall("get", "apps", "deployments", "ml")),
        ("PATCH", "/api/v1/namespaces/ml/pods/triton-a/status", {}, ApiCall("patch", "", "pods/status", "ml")),
        ("POST", "/api/v1/namespaces/ml/events", {}, ApiCall("create", "", "events", "ml")),
        ("PUT", "/api/v1/namespaces/ml/configmaps/add", {}, ApiCall("update", "", "configmaps", "ml")),
        ("DELETE", "/api/v1/namespaces/ml/configmaps", {}, ApiCall("deletecollection", "", "configmaps", "ml")),
        ("GET", "/api/v1/namespaces", {"watch": "true"}, ApiCall("watch", "", "namespaces", None)),
        ("GET", "/api/v1/namespaces/ml", {}, ApiCall("get", "", "namespaces", None)),
        ("PUT", "/api/v1/namespaces/ml/finalize", {}, ApiCall("update", "", "namespaces/finalize", None)),
        ("GET", "/apis/triton-operator.io/v1alpha1", {}, None),
        ("GET", "/api", {}, None),
    ],
)
def test_requests_are_read_as_rbac_reads_them(
    method: str, path: str, params: dict[str, str], call: ApiCall | None
) -> None:
    """The comparison above is only as right as this reading: namespace, subresource and verb of a request."""
    assert api_call(method, path, params) == call
