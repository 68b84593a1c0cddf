"""The CLI contract: validate exit codes and messages, import -> render round trips of Triton's own
public configs, and render's output files."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from google.protobuf import text_format

from tests.conftest import EXAMPLES, ROOT
from tests.support.crd_check import crd_errors
from tests.support.resources import GPU_SERVER_YAML
from triton_operator.api.config_json import ModelConfig
from triton_operator.cli import main, parser
from triton_operator.protocol.names import REVISION_PARAMETER

TRITON_EXAMPLES = sorted((ROOT / "tests/data/triton_examples").glob("*.pbtxt"))
# Triton's own failure-case configs (qa/L0_model_config/noautofill_platform) and an outdated docs
# example: each must be refused before it reaches a server, with the reason Triton gives.
REFUSED = {
    "server__qa__L0_model_config__noautofill_platform__batch_input_many_source0__config.pbtxt": (
        "takes exactly 1 source input, got 2"
    ),
    "server__qa__L0_model_config__noautofill_platform__batch_output_unknown_target__config.pbtxt": (
        "'UNKNOWN_OUTPUT' is not an output"
    ),
    "server__qa__L0_model_config__noautofill_platform__preserve_ordering0__config.pbtxt": (
        "allows only one priority level"
    ),
    "server__docs__examples__model_repository__simple_dyna_sequence__config.pbtxt": "unknown platform 'custom'",
}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("pbtxt", TRITON_EXAMPLES, ids=[p.name.removesuffix(".pbtxt") for p in TRITON_EXAMPLES])
def test_import_then_render_gives_back_the_same_config(
    pbtxt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", str(pbtxt)]) == 0
    imported = capsys.readouterr().out
    document = yaml.safe_load(imported)
    assert crd_errors(document) == [], "an imported model must pass the CRD schema and CEL rules"
    model_file = _write(tmp_path / "model.yaml", imported)
    server_file = _write(tmp_path / "server.yaml", GPU_SERVER_YAML)
    out = tmp_path / "out"
    code = main(["render", str(model_file), str(server_file), "--out", str(out), "--control-key", "k"])
    stderr = capsys.readouterr().err
    if pbtxt.name in REFUSED:
        assert code == 1 and REFUSED[pbtxt.name] in stderr
        assert not out.exists()
        return
    assert code == 0, stderr
    original = text_format.Parse(pbtxt.read_text(), ModelConfig())
    model_name = document["spec"].get("modelName", document["metadata"]["name"])
    rendered = text_format.Parse((out / model_name / "config.pbtxt").read_text(), ModelConfig())
    original.name = model_name  # Triton names the model after its directory when the config does not
    del rendered.parameters[REVISION_PARAMETER]
    assert rendered == original


def test_import_names_the_model_after_its_folder_and_keeps_triton_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "add_sub"
    folder.mkdir()
    _write(
        folder / "config.pbtxt",
        'backend: "python"\nmax_batch_size: 4\ninput [{ name: "A" data_type: TYPE_FP32 dims: [ -1 ] }]\n',
    )
    assert main(["import", str(folder / "config.pbtxt"), "--server", "gpu-fleet"]) == 0
    document = yaml.safe_load(capsys.readouterr().out)
    assert document["metadata"]["name"] == "add-sub"
    assert document["spec"]["modelName"] == "add_sub"
    assert document["spec"]["serverRef"] == {"name": "gpu-fleet"}
    assert document["spec"]["config"]["input"][0]["dims"] == [-1]
    assert "name" not in document["spec"]["config"]


def test_import_of_a_broken_file_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", str(_write(tmp_path / "config.pbtxt", "max_batch_size: [oops"))]) == 1
    assert "not a Triton config.pbtxt" in capsys.readouterr().err


def test_validate_accepts_the_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLES)]) == 0
    # The kustomization that lets GitOps tools take the folder is listed as ignored, nothing else.
    kustomization = EXAMPLES / "kustomization.yaml"
    assert capsys.readouterr().err.splitlines() == [
        f"ignored: {kustomization}: kustomize.config.k8s.io/v1beta1 Kustomization "
        "(not a TritonServer, TritonModel or ConfigMap)"
    ]


VARIABLE_DIMS_MODEL = """\
apiVersion: triton-operator.io/v1alpha1
kind: TritonModel
metadata: {name: python-batched-service}
spec:
  serverRef: {name: triton}
  modelName: python_batched_service
  sharedMemory: {executionBytes: 1Mi}
  config:
    backend: python
    maxBatchSize: 16
    dynamicBatching: {maxQueueDelayMicroseconds: 500000}
    input: [{name: input_field, dataType: TYPE_FP32, dims: [-1]}]
    output: [{name: out, dataType: TYPE_FP32, dims: [1]}]
    instanceGroup: [{count: 1, kind: KIND_CPU}]
"""


def test_validate_variable_dims_warns_and_passes_and_ragged_silences_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = _write(tmp_path / "server.yaml", GPU_SERVER_YAML)
    model = _write(tmp_path / "model.yaml", VARIABLE_DIMS_MODEL)
    assert main(["validate", str(model), str(server)]) == 0
    err = capsys.readouterr().err
    assert err.startswith(
        f"warning: {model}:12: TritonModel/default/python-batched-service: spec.config.input[0].allowRaggedBatch:"
    )
    assert "will not be batched together" in err
    _write(model, VARIABLE_DIMS_MODEL.replace("dims: [-1]}", "dims: [-1], allowRaggedBatch: true}"))
    assert main(["validate", str(model), str(server)]) == 0
    assert capsys.readouterr().err == ""


def test_validate_reports_every_error_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = VARIABLE_DIMS_MODEL.replace("maxBatchSize: 16", "maxBatchSize: 0").replace("dims: [1]", "dims: [0]")
    second = (
        "---\napiVersion: triton-operator.io/v1alpha1\nkind: TritonServer\n"
        "metadata: {name: other}\nspec: {replicas: -1}\n"
    )
    path = _write(tmp_path / "bad.yaml", broken + second)
    assert main(["validate", str(path), str(_write(tmp_path / "server.yaml", GPU_SERVER_YAML))]) == 1
    err = capsys.readouterr().err.splitlines()
    assert (
        f"error: {path}:19: TritonServer/default/other: spec.replicas: Input should be greater than or equal to 0"
        in err
    )
    assert any("spec.config.output[0].dims[0]: is 0; use a size >= 1" in line for line in err)


def test_render_writes_configs_and_manifests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["render", str(EXAMPLES), "--out", str(out), "--control-key", "secret"]) == 0
    models = ["add_sub", "python_batched_service", "shm_scale", "warm_identity"]
    assert sorted(p.name for p in out.iterdir()) == sorted([*models, "manifests.yaml"])
    config = text_format.Parse((out / "add_sub/config.pbtxt").read_text(), ModelConfig())
    assert config.name == "add_sub" and config.backend == "python"
    objects = list(yaml.safe_load_all((out / "manifests.yaml").read_text()))
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == ["ConfigMap"] * len(models) + ["Deployment", "NetworkPolicy", "Secret", "Secret", "Service"]
    first = (out / "manifests.yaml").read_text()
    assert main(["render", str(EXAMPLES), "--out", str(out), "--control-key", "secret"]) == 0
    assert (out / "manifests.yaml").read_text() == first, "same input, same bytes"


def test_render_over_an_earlier_render_leaves_only_the_new_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Files are written over, not emptied first: what was longer before is cut to the new length."""
    fresh, over = tmp_path / "fresh", tmp_path / "over"
    assert main(["render", str(EXAMPLES), "--out", str(fresh), "--control-key", "secret"]) == 0
    written = sorted(path.relative_to(fresh) for path in fresh.rglob("*") if path.is_file())
    for relative in written:
        (over / relative).parent.mkdir(parents=True, exist_ok=True)
        (over / relative).write_bytes((fresh / relative).read_bytes() + b"# from an earlier render\n" * 100)
    assert main(["render", str(EXAMPLES), "--out", str(over), "--control-key", "secret"]) == 0
    assert [(over / relative).read_bytes() for relative in written] == [
        (fresh / relative).read_bytes() for relative in written
    ]


# A wrong object in each field a server passes to its pod as written, and where the Deployment holds it.
WRONG_KUBERNETES_OBJECTS = {
    "resources: {claims: [{name: gpu, notAField: 1}]}": "spec.template.spec.containers.0.resources.claims.0",
    "pod: {tolerations: [{key: k, notAField: 1}]}": "spec.template.spec.tolerations.0",
    "pod: {affinity: {notAField: 1}}": "spec.template.spec.affinity",
    "pod: {securityContext: {notAField: 1}}": "spec.template.spec.securityContext",
    "pod: {sidecars: [{name: client, image: client, notAField: 1}]}": "spec.template.spec.containers.1",
}


@pytest.mark.parametrize(
    ("field", "where"),
    WRONG_KUBERNETES_OBJECTS.items(),
    ids=["claims", "tolerations", "affinity", "securityContext", "sidecars"],
)
def test_validate_finds_a_wrong_kubernetes_object_where_the_deployment_holds_it(
    field: str, where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = _write(tmp_path / "server.yaml", GPU_SERVER_YAML + f"  {field}\n")
    assert main(["validate", str(server)]) == 1
    assert (
        f"Deployment/default/triton: {where}: Additional properties are not allowed ('notAField' was unexpected)"
        in capsys.readouterr().err
    )


def test_render_never_folds_a_long_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A value of any length stays on the line of its key, as grep and diff readers expect."""
    note = " ".join(["a long annotation of many words"] * 10)
    server = _write(tmp_path / "server.yaml", GPU_SERVER_YAML + f"  service: {{annotations: {{note: {note}}}}}\n")
    assert main(["render", str(server), "--out", str(tmp_path / "out")]) == 0
    assert f"    note: {note}\n" in (tmp_path / "out/manifests.yaml").read_text()


def test_render_refuses_and_writes_nothing_on_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _write(
        tmp_path / "model.yaml",
        VARIABLE_DIMS_MODEL.replace("maxBatchSize: 16", "maxBatchSize: 4").replace(
            "maxQueueDelayMicroseconds: 500000", "preferredBatchSize: [8]"
        ),
    )
    out = tmp_path / "out"
    assert main(["render", str(model), str(_write(tmp_path / "server.yaml", GPU_SERVER_YAML)), "--out", str(out)]) == 1
    assert "preferredBatchSize[0]: is 8, above maxBatchSize 4" in capsys.readouterr().err
    assert not out.exists()


def test_run_needs_a_scope_and_credentials_and_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run"])
    assert (
        exited.value.code == 2
        and "one of the arguments -A/--all-namespaces -n/--namespace is required" in capsys.readouterr().err
    )
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert main(["run", "-A"]) == 2  # kopf would retry its login for ever
    [line] = capsys.readouterr().err.splitlines()
    assert line == (
        "triton-operator run: no Kubernetes credentials: "
        "not in a pod (no /var/run/secrets/kubernetes.io/serviceaccount/token) "
        f"and no kubeconfig at {tmp_path / 'missing'}"
    )


def test_local_takes_triton_s_own_ports_by_default() -> None:
    args = parser().parse_args(["local", "crs"])
    assert (args.http_port, args.grpc_port, args.metrics_port) == (8000, 8001, 8002)


def test_a_default_port_in_use_is_refused_with_the_flag_to_change_it(tmp_path: Path) -> None:
    """8000 held here (or by whoever holds it now: refused all the same), local says which flag moves it."""
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            holder.bind(("127.0.0.1", 8000))
            holder.listen()
        except OSError:
            pass  # another process holds it
        command = [
            sys.executable,
            "-m",
            "triton_operator.cli",
            "local",
            str(EXAMPLES),
            "--once",
            "--workdir",
            str(tmp_path),
        ]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("triton-operator local: port 800") and "is in use" in line
    flag = {"8000": "--http-port", "8001": "--grpc-port", "8002": "--metrics-port"}[line.split("port ")[1][:4]]
    assert line.endswith(f"choose another with {flag}")


PLACED_MODEL = """\
---
apiVersion: triton-operator.io/v1alpha1
kind: TritonModel
metadata: {{name: {name}}}
spec:
  {where}
  {memory}
  modelName: {name}
  config:
    backend: python
    maxBatchSize: 0
    input: [{{name: IN, dataType: TYPE_FP32, dims: [4]}}]
    output: [{{name: OUT, dataType: TYPE_FP32, dims: [4]}}]
"""
PLACEMENT_SERVERS = """\
apiVersion: triton-operator.io/v1alpha1
kind: TritonServer
metadata: {name: cpu-a, labels: {pool: cpu}}
spec: {modelRepository: {pvc: {claimName: models}}, resources: {limits: {memory: 4Gi}}}
---
apiVersion: triton-operator.io/v1alpha1
kind: TritonServer
metadata: {name: cpu-b, labels: {pool: cpu}}
spec: {modelRepository: {pvc: {claimName: models}}, capacity: {memory: 2Gi, gpuMemory: 16Gi}}
"""
SELECTED = "serverSelector: {matchLabels: {pool: cpu}}"


def _placement_fleet(tmp_path: Path, huge: str = "5Gi") -> Path:
    models = [
        PLACED_MODEL.format(name="big", where=SELECTED, memory="memory: {cpu: 3Gi, gpu: 1Gi}"),
        PLACED_MODEL.format(name="huge", where=SELECTED, memory=f"memory: {{cpu: {huge}}}"),
        PLACED_MODEL.format(name="small", where=SELECTED, memory=""),
        PLACED_MODEL.format(name="pinned", where="serverRef: {name: cpu-b}", memory="memory: {cpu: 1Gi}"),
    ]
    return _write(tmp_path / "fleet.yaml", PLACEMENT_SERVERS + "".join(models))


def test_place_prints_where_each_model_goes_and_why_one_cannot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = _placement_fleet(tmp_path)
    assert main(["place", str(fleet)]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[:5] == [
        "MODEL   NAMESPACE  SERVER           MEMORY  SOURCE    GPU MEMORY",
        "big     default    cpu-a            3Gi     Declared  1Gi",
        "small   default    cpu-a            20Mi    Default   0",
        "pinned  default    cpu-b            1Gi     Declared  0",
        "huge    default    (unschedulable)  5Gi     Declared  0",
    ]
    assert "cpu-a   default    1         3.9Gi     3Gi     940Mi  unknown       unknown" in lines
    assert "cpu-b   default    1         2Gi       1Gi     1Gi    16Gi          16Gi" in lines
    assert lines[-1] == (
        "unschedulable: default/huge: 0/2 servers have room for 5Gi (Declared): "
        "cpu-b (1Gi free, 16Gi GPU free), cpu-a (940Mi free)"
    )
    # The selector models' "checked alone" warnings are what place answers: not repeated here.
    assert captured.err.splitlines() == ["4 models, 2 servers: 0 errors, 0 warnings", "1 model fit on no server"]


def test_place_json_for_scripts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", str(_placement_fleet(tmp_path, huge="1Gi")), "-o", "json"]) == 0
    placed = json.loads(capsys.readouterr().out)
    assert placed["models"] == [
        {
            "name": "big",
            "namespace": "default",
            "server": "cpu-a",
            "memoryBytes": 3 << 30,
            "source": "Declared",
            "gpuMemoryBytes": 1 << 30,
        },
        {"name": "huge", "namespace": "default", "server": "cpu-b", "memoryBytes": 1 << 30, "source": "Declared"},
        {"name": "pinned", "namespace": "default", "server": "cpu-b", "memoryBytes": 1 << 30, "source": "Declared"},
        {"name": "small", "namespace": "default", "server": "cpu-a", "memoryBytes": 20 << 20, "source": "Default"},
    ]
    assert placed["servers"] == [
        {
            "name": "cpu-a",
            "namespace": "default",
            "capacityBytes": (4 << 30) - (64 << 20),
            "placedBytes": (3 << 30) + (20 << 20),
        },
        {
            "name": "cpu-b",
            "namespace": "default",
            "capacityBytes": 2 << 30,
            "placedBytes": 2 << 30,
            "gpuCapacityBytes": 16 << 30,
            "gpuPlacedBytes": 0,
        },
    ]


def test_place_refuses_a_model_with_two_ways_to_its_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    both = PLACED_MODEL.format(name="both", where=SELECTED + "\n  serverRef: {name: cpu-a}", memory="")
    assert main(["place", str(_write(tmp_path / "fleet.yaml", PLACEMENT_SERVERS + both))]) == 1
    err = capsys.readouterr().err
    assert (
        "TritonModel/default/both: spec: set exactly one of serverRef" in err
        and "serverRef and serverSelector are set" in err
    )
