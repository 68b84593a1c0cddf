"""The Helm chart, rendered by the real helm: lint, Kubernetes schema, hardening, RBAC, values schema."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.support.chart import CHART, helm, render
from tests.support.dockerfile import instructions
from triton_operator import cli
from triton_operator.api.resources import TritonServer
from triton_operator.k8s.process import run as k8s_run
from triton_operator.k8s.process.settings import Settings
from triton_operator.render.autoscaler_manifests import ADAPTER_METRICS, ADAPTER_QUERIES
from triton_operator.render.manifests import server_labels
from triton_operator.render.schema import check_manifests

RULES = yaml.safe_load((CHART / "rbac/rules.yaml").read_text())

NAMESPACED = ["--set", "rbac.clusterWide=false", "--set", "watchNamespaces={ml,serving}"]
MODES = {"cluster-wide": [], "namespaced": NAMESPACED}
EXTRAS = {
    "plain": [],
    "monitored": ["--set", "serviceMonitor.enabled=true,podMonitor.enabled=true,dashboard.enabled=true"],
    "adapter-rules": ["--set", "prometheusAdapter.rules.enabled=true,prometheusAdapter.rules.namespace=monitoring"],
}
COMBINATIONS = list(itertools.product(MODES, EXTRAS))
PROMETHEUS_OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor"}


def only(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def rules_by_role(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """(kind, namespace, name) of every ClusterRole and Role, to its rules."""
    return {
        (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]): obj["rules"]
        for obj in objects
        if obj["kind"] in ("ClusterRole", "Role")
    }


def operator_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [deployment] = only(objects, "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("mode, extra", COMBINATIONS)
def test_chart_lints_strictly(mode: str, extra: str) -> None:
    result = helm("lint", "--strict", str(CHART), *MODES[mode], *EXTRAS[extra], check=False)
    assert result.returncode == 0 and "[ERROR]" not in result.stdout and "[WARNING]" not in result.stdout, (
        result.stdout + result.stderr
    )


@pytest.mark.parametrize("mode, extra", COMBINATIONS)
def test_every_rendered_object_passes_the_kubernetes_schema(mode: str, extra: str) -> None:
    objects = render(*MODES[mode], *EXTRAS[extra])
    kinds = {obj["kind"] for obj in objects}
    assert {"Deployment", "ServiceAccount", "Service", "ClusterRole", "ClusterRoleBinding"} <= kinds
    assert (kinds >= PROMETHEUS_OPERATOR_KINDS) == (extra == "monitored")
    assert ("ConfigMap" in kinds) == (extra != "plain")
    assert check_manifests(obj for obj in objects if obj["kind"] not in PROMETHEUS_OPERATOR_KINDS) == []


def test_monitors_have_the_shape_prometheus_operator_reads() -> None:
    """kubernetes-validate does not know these CRDs: check what Prometheus needs to scrape."""
    objects = render(*EXTRAS["monitored"])
    [service] = only(objects, "Service")
    [service_monitor] = only(objects, "ServiceMonitor")
    [pod_monitor] = only(objects, "PodMonitor")
    for monitor in (service_monitor, pod_monitor):
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["namespace"] == "triton-system"
    assert service_monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert (
        [e["port"] for e in service_monitor["spec"]["endpoints"]]
        == [p["name"] for p in service["spec"]["ports"]]
        == ["metrics"]
    )
    # The operator's own `namespace` label (the TritonServer's) must survive the scrape.
    assert service_monitor["spec"]["endpoints"][0]["honorLabels"] is True
    assert pod_monitor["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "tritonserver",
        "app.kubernetes.io/managed-by": "triton-operator",
    }
    assert pod_monitor["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics"}]
    assert pod_monitor["spec"]["namespaceSelector"] == {"any": True}
    [namespaced] = only(render(*NAMESPACED, *EXTRAS["monitored"]), "PodMonitor")
    assert namespaced["spec"]["namespaceSelector"] == {"matchNames": ["ml", "serving"]}


def test_the_triton_pods_the_operator_renders_match_the_pod_monitor(examples: list[dict[str, Any]]) -> None:
    [server] = [TritonServer.model_validate(d) for d in examples if d["kind"] == "TritonServer"]
    [pod_monitor] = only(render(*EXTRAS["monitored"]), "PodMonitor")
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= server_labels(server).items()


def test_the_prometheus_adapter_rules_serve_the_metrics_the_operators_hpas_scale_on() -> None:
    """One file of rules: a values file for the adapter's chart, and the ConfigMap for its rules.existing."""
    rules = yaml.safe_load((CHART / "autoscaling/prometheus-adapter-values.yaml").read_text())["rules"]["custom"]
    served = {rule["name"]["as"]: rule["metricsQuery"] for rule in rules}
    assert served == {ADAPTER_METRICS[metric]: ADAPTER_QUERIES[metric] for metric in ADAPTER_METRICS}
    for rule in rules:  # per pod, in its namespace: what an HPA's Pods metric asks for
        assert rule["resources"] == {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}
        series = rule["name"]["matches"].strip("^$")
        assert rule["seriesQuery"] == f'{series}{{namespace!="",pod!=""}}' and series in rule["metricsQuery"]
    [config_map] = only(render(*EXTRAS["adapter-rules"]), "ConfigMap")
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert yaml.safe_load(config_map["data"]["config.yaml"]) == {"rules": rules}
    assert only(render(), "ConfigMap") == []


def test_the_deployment_is_hardened_probed_and_two_replicas_that_elect_a_leader() -> None:
    objects = render()
    [deployment] = only(objects, "Deployment")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    container = operator_container(objects)
    # A new pod is a standby until the old leader releases the Lease, so pods may roll one by one.
    assert spec["replicas"] == 2 and spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert isinstance(pod["securityContext"]["runAsUser"], int) and pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "liveness"}
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"metrics": 8080, "liveness": 8081}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert pod["serviceAccountName"] == only(objects, "ServiceAccount")[0]["metadata"]["name"]


def test_without_leader_election_the_deployment_is_one_replica_recreated() -> None:
    """Two operators without election would reconcile at once: the old one stops before the new one starts."""
    objects = render("--set", "leaderElection.enabled=false,replicaCount=1")
    [deployment] = only(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert not only(objects, "PodDisruptionBudget") and not only(objects, "Role")


def test_a_disruption_budget_keeps_one_replica_through_drains_when_there_are_more() -> None:
    objects = render()
    [budget] = only(objects, "PodDisruptionBudget")
    [deployment] = only(objects, "Deployment")
    assert budget["spec"] == {"minAvailable": 1, "selector": deployment["spec"]["selector"]}
    assert not only(render("--set", "replicaCount=1"), "PodDisruptionBudget")  # it would block every drain


def test_the_settings_reach_the_operator_as_its_own_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every setting the operator reads is set, under its exact name, and parses to its default, but for
    leader election: on, on a Lease named after the release, in the pod's own namespace (POD_NAMESPACE);
    and the operator's pod labels, which servers' NetworkPolicies let in: the chart's (its namespace is the
    pod's own too)."""
    container = operator_container(render())
    env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    from_pod = {"lease_namespace", "operator_namespace"}
    assert set(env) == {f"TRITON_OPERATOR_{name.upper()}" for name in Settings.model_fields if name not in from_pod}
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # read as the operator reads them (the labels are JSON)
    assert Settings() == Settings(
        leader_election=True,
        lease_name="ops-triton-operator",
        operator_pod_labels={"app.kubernetes.io/name": "triton-operator", "app.kubernetes.io/instance": "ops"},
    )
    downward = {item["name"]: item["valueFrom"] for item in container["env"] if "valueFrom" in item}
    assert downward == {
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "POD_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
    }
    changed = {
        item["name"]: item.get("value")
        for item in operator_container(render("--set", "logLevel=DEBUG,settings.loadTimeoutSeconds=1200"))["env"]
    }
    assert (
        changed["TRITON_OPERATOR_LOG_LEVEL"] == "DEBUG"
        and float(changed["TRITON_OPERATOR_LOAD_TIMEOUT_SECONDS"]) == 1200
    )


def test_the_operations_page_lists_every_setting_as_the_code_describes_it() -> None:
    """One description per setting: docs/operations.md's table holds each field's default and description."""
    page = (ROOT / "docs/operations.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `TRITON_OPERATOR_")]
    assert rows == [
        f"| `TRITON_OPERATOR_{name.upper()}` | {field.default} | {field.description} |"
        for name, field in Settings.model_fields.items()
    ]


@pytest.mark.parametrize("mode, scope", [("cluster-wide", (True, [])), ("namespaced", (False, ["ml", "serving"]))])
def test_the_image_runs_the_operator_in_the_scope_the_chart_grants(
    mode: str, scope: tuple[bool, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image's entrypoint plus the rendered args, through the CLI's own parser and `run` command,
    reach kopf as the scope the RBAC of that mode covers; kopf itself is not started."""
    [entrypoint] = instructions("ENTRYPOINT")
    program, *command = json.loads(entrypoint)
    argv = [*command, *operator_container(render(*MODES[mode]))["args"]]
    started = []

    def run_kopf(clusterwide: bool, namespaces: list[str]) -> int:
        started.append((clusterwide, list(namespaces)))
        return 0

    monkeypatch.setattr(k8s_run, "run", run_kopf)
    args = cli.parser().parse_args(argv)
    assert program == "triton-operator" and args.run(args) == 0
    assert started == [scope]


# In both modes, leader election's Lease is granted in the release namespace only.
LEADER_ELECTION_ROLE = {("Role", "triton-system", "ops-triton-operator-leader-election"): RULES["leaderElection"]}


def test_cluster_wide_rbac_is_framework_and_application_cluster_roles() -> None:
    framework = RULES["framework"]
    roles = rules_by_role(render())
    assert roles == {
        ("ClusterRole", "", "ops-triton-operator-framework"): framework["crds"] + framework["events"],
        ("ClusterRole", "", "ops-triton-operator-application"): RULES["application"],
        **LEADER_ELECTION_ROLE,
    }


def test_namespaced_rbac_keeps_only_kopfs_cluster_scoped_reads_cluster_wide() -> None:
    roles = rules_by_role(render(*NAMESPACED))
    expected = {
        ("ClusterRole", "", "ops-triton-operator-framework"): RULES["framework"]["crds"]
        + RULES["framework"]["namespaces"],
        **LEADER_ELECTION_ROLE,
    }
    for namespace in ("ml", "serving"):
        expected[("Role", namespace, "ops-triton-operator-framework")] = RULES["framework"]["events"]
        expected[("Role", namespace, "ops-triton-operator-application")] = RULES["application"]
    assert roles == expected


@pytest.mark.parametrize("mode", MODES)
def test_every_role_is_bound_to_the_operator_and_nothing_is_a_wildcard(mode: str) -> None:
    objects = render(*MODES[mode])
    [account] = only(objects, "ServiceAccount")
    roles = {
        (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        for obj in objects
        if obj["kind"] in ("ClusterRole", "Role")
    }
    bound = set()
    for binding in only(objects, "ClusterRoleBinding") + only(objects, "RoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "triton-system"}
        ]
        bound.add((binding["roleRef"]["kind"], binding["metadata"].get("namespace", ""), binding["roleRef"]["name"]))
    assert bound == roles
    for rules in rules_by_role(objects).values():
        for rule in rules:
            assert set(rule) == {"apiGroups", "resources", "verbs"}, rule
            assert "*" not in rule["apiGroups"] + rule["resources"] + rule["verbs"], rule


def test_rbac_can_be_left_to_the_cluster_admin() -> None:
    kinds = {obj["kind"] for obj in render("--set", "rbac.create=false")}
    assert kinds.isdisjoint({"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"})


@pytest.mark.parametrize(
    "values, complaint",
    [
        (["--set", "replicaCount=-1"], "/replicaCount"),
        (["--set", "replicaCount=2,leaderElection.enabled=false"], "/replicaCount"),
        (["--set", "leaderElection.leaseDurationSeconds=0"], "/leaderElection/leaseDurationSeconds"),
        (["--set", "leaderElection.leaseDuration=15"], "additional properties 'leaseDuration' not allowed"),
        (["--set", "image=5"], "/image"),
        (["--set", "imagee.tag=1"], "additional properties 'imagee' not allowed"),
        (["--set", "image.digest=x"], "additional properties 'digest' not allowed"),
        (["--set", "settings.parallelLoads=0"], "/settings/parallelLoads"),
        (["--set", "settings.resyncSeconds=0"], "/settings/resyncSeconds"),
        (["--set", "settings.watchServerTimeoutSeconds=1.5"], "/settings/watchServerTimeoutSeconds"),
        (["--set-string", "settings.loadTimeoutSeconds=ten"], "/settings/loadTimeoutSeconds"),
        (["--set", "metricsPort=70000"], "/metricsPort"),
        (["--set", "logLevel=TRACE"], "/logLevel"),
        (["--set", "rbac.clusterWide=false"], "/watchNamespaces"),
        (["--set", "rbac.clusterWide=false", "--set", "watchNamespaces={Not_A_Namespace}"], "/watchNamespaces/0"),
    ],
)
def test_the_values_schema_refuses_wrong_values(values: list[str], complaint: str) -> None:
    result = helm("template", "ops", str(CHART), *values, check=False)
    assert result.returncode != 0
    assert "don't meet the specifications of the schema" in result.stderr and complaint in result.stderr, result.stderr


@pytest.mark.parametrize(
    "values, complaint",
    [
        (
            ["--set", "leaderElection.renewDeadlineSeconds=15"],
            "renewDeadlineSeconds must be below leaseDurationSeconds",
        ),
        (
            ["--set", "leaderElection.retryPeriodSeconds=9"],
            "retryPeriodSeconds must be below renewDeadlineSeconds / 1.2",
        ),
    ],
)
def test_lease_timings_that_could_elect_two_leaders_are_refused(values: list[str], complaint: str) -> None:
    """The operator refuses them too (Settings), but only once the pods crash-loop: helm says it first."""
    result = helm("template", "ops", str(CHART), *values, check=False)
    assert result.returncode != 0 and complaint in result.stderr, result.stderr


def test_every_value_is_documented_in_values_yaml() -> None:
    """Each key has a comment right above it, or lies inside a block whose key has one (resources...)."""
    ancestors: list[tuple[int, bool]] = []  # (indent, documented) of the keys enclosing this line
    previous = ""
    for number, line in enumerate((CHART / "values.yaml").read_text().splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith(("#", "-")):
            indent = len(line) - len(line.lstrip())
            ancestors = [(i, documented) for i, documented in ancestors if i < indent]
            documented = previous.startswith("#")
            assert documented or any(d for _, d in ancestors), f"values.yaml line {number} is undocumented: {line}"
            ancestors.append((indent, documented))
        previous = stripped


def test_chart_installs_the_generated_crds() -> None:
    rendered = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all(helm("template", "ops", str(CHART), "--include-crds").stdout)
        if d and d["kind"] == "CustomResourceDefinition"
    }
    generated = {p.name: yaml.safe_load(p.read_text()) for p in (ROOT / "crds").glob("*.yaml")}
    assert sorted(rendered) == sorted(crd["metadata"]["name"] for crd in generated.values())
    for crd in generated.values():
        assert rendered[crd["metadata"]["name"]] == crd


def test_notes_tell_the_next_step_and_how_to_upgrade_crds() -> None:
    notes = helm("install", "ops", str(CHART), "--dry-run=client", *NAMESPACED).stdout.split("NOTES:", 1)[1]
    assert "kubectl apply -k examples/ --namespace ml" in notes
    assert "kubectl get tritonservers,tritonmodels --namespace ml" in notes
    assert "helm show crds" in notes
