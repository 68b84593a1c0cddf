"""Bad input never crashes: every case a new user met, and a generated stream of mutated CRs and
random bytes, through `validate`, `render` and `import` (the same stream into a running `local`
is in tests/local/test_local_mode.py). Exit codes: 0 fine, 1 errors in the input (all of them, each with its
file), 2 the command could not run."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import EXAMPLES, ROOT, example_documents
from tests.support.cli import run
from tests.support.crd_check import crd_errors
from tests.support.mutations import mutated
from triton_operator.api.parse import parse_resources
from triton_operator.local.runner import LocalModeError, choose_server
from triton_operator.sources import load

SERVER = "apiVersion: triton-operator.io/v1alpha1\nkind: TritonServer\nmetadata: {name: triton}\n"
MODEL = """\
apiVersion: triton-operator.io/v1alpha1
kind: TritonModel
metadata: {name: m}
spec:
  serverRef: {name: triton}
  config:
    backend: python
    maxBatchSize: 4
    input: [{name: x, dataType: TYPE_FP32, dims: [2]}]
    output: [{name: y, dataType: TYPE_FP32, dims: [2]}]
"""


def without_lines(err: str) -> str:
    """The findings without the line of each field (`FILE:12: ...`), for tests about what they say."""
    return re.sub(r"(\.yaml):\d+: ", r"\1: ", err)


def assert_no_crash(code: int, err: str, allowed: tuple[int, ...] = (0, 1)) -> None:
    assert "Traceback" not in err and "unexpected error" not in err, err
    assert code in allowed, err


# Each case of the issue: file contents, then what stderr must say (after "FILE"), exit 1.
CASES = {
    "yaml-syntax-error": ("kind: TritonModel\nmetadata: {name: x\n", ["{file}:3: not valid YAML"]),
    "binary": (bytes(range(128, 256)), ["{file}: not UTF-8 text"]),
    "metadata-a-string": (
        SERVER.replace("{name: triton}", "triton"),
        [
            "{file}: TritonServer/default/?: metadata: expected an object, got 'triton': "
            "write metadata: {{name: triton}}"
        ],
    ),
    "list-document": ("- a\n- b\n", ["{file}: document 1: is a list"]),
    "memory-lots": (
        SERVER + "spec: {resources: {limits: {memory: lots}}}\n",
        ["spec.resources.limits.memory: 'lots' is not a Kubernetes quantity"],
    ),
    "cpu-one": (
        SERVER + "spec: {resources: {requests: {cpu: one}}}\n",
        ["spec.resources.requests.cpu: 'one' is not a Kubernetes quantity"],
    ),
    "bad-base64": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: code}\nbinaryData: {model.py: '!!'}\n---\n" + SERVER,
        ["{file}: ConfigMap/default/code: binaryData.model.py: not base64"],
    ),
    "wrong-version": (
        SERVER.replace("v1alpha1", "v1"),
        ["{file}: TritonServer/default/triton: apiVersion: unknown version 'triton-operator.io/v1'"],
    ),
    "misspelt-kind": (
        MODEL.replace("TritonModel", "TritonModle"),
        ["kind: unknown kind 'TritonModle' in triton-operator.io; did you mean 'TritonModel'?"],
    ),
    "empty-file": ("", ["warning: {file}: empty", "no TritonServer or TritonModel found"]),
    "shm-1e30": (
        SERVER + "spec: {pythonBackend: {shmDefaultBytes: 1e30}}\n",
        ["spec.pythonBackend.shmDefaultBytes: '1e30' is out of range"],
    ),
    "execution-bytes-1e30": (
        SERVER + "---\n" + MODEL.replace("  config:", "  sharedMemory: {executionBytes: 1e30}\n  config:"),
        ["spec.sharedMemory.executionBytes: '1e30' is out of range"],
    ),
    "owned-flags": (
        SERVER
        + (
            "spec: {extraArgs: ['--model-control-mode=poll', '--http-port=1', "
            "'--backend-config=python,shm-growth-byte-size=1']}\n"
        ),
        ["--model-control-mode (", "--http-port (", "--backend-config=python,shm-growth-byte-size=1 ("],
    ),
    "spec-typo": (SERVER + "spec: {replica: 2}\n", ["spec.replica: unknown field; did you mean 'replicas'?"]),
    # Each field error on the line the YAML gives it; messages in words, with what to write instead.
    "model-name-with-a-space": (
        SERVER + "---\n" + MODEL.replace("  config:", "  modelName: add sub\n  config:"),
        [
            "{file}:10: TritonModel/default/m: spec.modelName: 'add sub' cannot be a Triton model name, which is a "
            "folder in the model repository: use letters, digits, '_', '.' and '-'"
        ],
    ),
    "server-ref-a-string": (
        SERVER + "---\n" + MODEL.replace("serverRef: {name: triton}", "serverRef: triton"),
        [
            "{file}:9: TritonModel/default/m: spec.serverRef: expected an object, got 'triton': "
            "write serverRef: {{name: triton}}"
        ],
    ),
    "repeated-key": (
        SERVER + "spec: {replicas: 1}\nspec: {replicas: 2}\n",
        [
            "{file}:5: TritonServer/default/triton: spec: 'spec' is given twice in one map (first on line 4): "
            "kubectl and the API server refuse that"
        ],
    ),
    # Names the API server refuses, for the object or for the objects named after it.
    "server-name-upper-case": (
        SERVER.replace("{name: triton}", "{name: Triton_A}"),
        [
            "{file}:3: TritonServer/default/Triton_A: metadata.name: 'Triton_A' cannot be used: a TritonServer's "
            "name names its Service",
            "(e.g. 'triton-a')",
        ],
    ),
    "server-name-with-a-dot": (
        SERVER.replace("{name: triton}", "{name: triton.gpu}"),
        ["metadata.name: 'triton.gpu' cannot be used"],
    ),
    "model-name-underscore": (
        MODEL.replace("{name: m}", "{name: add_sub}"),
        [
            "{file}:3: TritonModel/default/add_sub: metadata.name: 'add_sub' is not a Kubernetes object name",
            "(e.g. 'add-sub')",
        ],
    ),
    "model-name-too-long": (
        MODEL.replace("{name: m}", "{name: " + "m" * 64 + "}"),
        ["metadata.name: is 64 characters; at most 63, as the label triton-operator.io/model"],
    ),
    "inline-server-name-with-a-dot": (
        MODEL.replace("{name: m}", "{name: m.v2}").replace(
            "serverRef: {name: triton}", "server: {modelRepository: {pvc: {claimName: models}}}"
        ),
        ["metadata.name: 'm.v2' cannot be used: a model with its own server: its name names its Service"],
    ),
    # What Triton would refuse only once it runs: no version folder, no files and nowhere to load them from, no backend.
    "files-without-a-version-folder": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: code}\ndata: {model.py: pass}\n---\n"
        + SERVER
        + "---\n"
        + MODEL.replace(
            "  config:", "  files: {configMapRef: {name: code, items: [{key: model.py, path: model.py}]}}\n  config:"
        ),
        [
            "spec.files.configMapRef.items: no path is inside a version folder, so Triton finds no version to "
            "load: put the model's files under one, e.g. path: 1/model.py"
        ],
    ),
    "no-files-and-no-repository": (
        SERVER + "---\n" + MODEL,
        [
            "{file}:8: TritonModel/default/m: spec.files: the model has no files and its server no "
            "spec.modelRepository (pvc or uri) to load them from"
        ],
    ),
    "backend-not-on-the-server": (
        SERVER + "spec: {backends: [onnxruntime], modelRepository: {pvc: {claimName: models}}}\n---\n" + MODEL,
        [
            "spec.config.backend: backend 'python' is not among the server's backends (onnxruntime): its Triton "
            "cannot load the model"
        ],
    ),
}


@pytest.mark.parametrize("command", ["validate", "render"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_case_is_an_error_naming_its_file_not_a_crash(case: str, command: str, tmp_path: Path) -> None:
    content, expected = CASES[case]
    path = tmp_path / f"{case}.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "out"
    code, stdout, err = run(command, str(path), *(["--out", str(out)] if command == "render" else []))
    assert_no_crash(code, err)
    assert code == 1, err
    for text in expected:
        assert text.format(file=path) in err or text.format(file=path) in without_lines(err), err
    assert "error" in stdout.splitlines()[-1], "the summary line ends the output"
    assert not out.exists(), "render writes nothing when the input has errors"


def test_a_misspelt_field_is_one_error_not_a_second_one_for_the_field_it_meant(tmp_path: Path) -> None:
    path = tmp_path / "model.yaml"
    path.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: code}\ndata: {model.py: pass}\n---\n"
        + MODEL.replace(
            "  config:", "  files: {configMapRef: {name: code, items: [{kye: model.py, path: 1/model.py}]}}\n  config:"
        )
    )
    code, _, err = run("validate", str(path))
    assert code == 1
    assert err.splitlines() == [
        f"error: {path}:11: TritonModel/default/m: spec.files.configMapRef.items.0.kye: unknown field; did you "
        "mean 'key'?"
    ]


def test_a_missing_path_an_empty_folder_and_other_kinds_are_said_plainly(tmp_path: Path) -> None:
    for command in (["validate"], ["render", "--out", str(tmp_path / "out")]):
        code, _, err = run(*command, str(tmp_path / "nope.yaml"))
        assert code == 1 and f"error: {tmp_path / 'nope.yaml'}: no such file or folder" in err
    (tmp_path / "empty").mkdir()
    code, stdout, err = run("validate", str(tmp_path / "empty"))
    assert code == 1 and "no TritonServer or TritonModel found" in err
    assert stdout == "0 models, 0 servers: 1 error, 0 warnings\n"
    other = tmp_path / "mixed.yaml"
    other.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n---\n" + SERVER)
    code, stdout, err = run("validate", str(other))
    assert code == 0 and f"ignored: {other}: apps/v1 Deployment/default/web" in err
    assert stdout == "0 models, 1 server, 1 ignored: 0 errors, 0 warnings\n"


def test_every_mistake_of_one_model_comes_in_one_run(tmp_path: Path) -> None:
    model = MODEL.replace("  config:", "  sharedMemroy: {}\n  config:").replace(
        "maxBatchSize: 4", "maxBatchSize: 0\n    dynamicBatching: {preferedBatchSize: [2]}"
    )
    model = model.replace("dims: [2]}]\n    output", "dims: [0], allowRaggedBatch: true}]\n    outptu")
    path = tmp_path / "model.yaml"
    path.write_text(model)
    server = tmp_path / "server.yaml"
    server.write_text(
        SERVER + "spec: {replicas: -1, extraArgs: ['--model-repository=/x', '--strict-readiness=true']}\n"
    )
    code, stdout, err = run("validate", str(path), str(server))
    assert code == 1
    err = without_lines(err)
    where = f"{path}: TritonModel/default/m"
    for expected in (
        f"{where}: spec.sharedMemroy: unknown field; did you mean 'sharedMemory'?",
        f"{where}: spec.config.outptu: unknown field; did you mean 'output'?",
        f"{where}: spec.config.dynamicBatching.preferedBatchSize: unknown field; did you mean 'preferredBatchSize'?",
        f"{where}: spec.config.input[0].dims[0]: is 0",
        f"{where}: spec.config.input[0].allowRaggedBatch: ragged batching needs batching",
        f"{server}: TritonServer/default/triton: spec.replicas:",
        "--model-repository (use spec.modelRepository); --strict-readiness (",
    ):
        assert expected in err, err
    # dynamicBatching with maxBatchSize 0; a python model with no outputs (outptu is no field)
    assert stdout.splitlines()[-1].startswith("1 model, 1 server: 7 errors, 2 warnings")


def test_errors_of_every_check_come_in_one_run_each_with_its_file(tmp_path: Path) -> None:
    """The API schema, Triton's rules, the server checks and the Kubernetes schema of what would be
    rendered: a later check is not skipped because an earlier one found something."""
    files = {
        "server.yaml": SERVER
        + "spec: {modelRepository: {pvc: {claimName: models}}, pod: {tolerations: [{key: k, effectt: NoSchedule}]}}\n",
        "schema.yaml": MODEL.replace("name: m", "name: schema").replace("  config:", "  sharedMemroy: {}\n  config:"),
        "triton-rule.yaml": MODEL.replace("name: m", "name: triton-rule").replace(
            "y, dataType: TYPE_FP32, dims: [2]", "y, dataType: TYPE_FP32, dims: [0]"
        ),
        "server-check.yaml": MODEL.replace("name: m", "name: server-check").replace(
            "maxBatchSize: 4", "maxBatchSize: 4\n    instanceGroup: [{kind: KIND_GPU}]"
        ),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code, stdout, err = run("validate", str(tmp_path))
    assert code == 1
    err = without_lines(err)
    for expected in (
        "schema.yaml: TritonModel/default/schema: spec.sharedMemroy: unknown field",
        "triton-rule.yaml: TritonModel/default/triton-rule: spec.config.output[0].dims[0]: is 0",
        "server-check.yaml: TritonModel/default/server-check: spec.config.instanceGroup[0].kind: KIND_GPU needs GPUs",
        "server.yaml: Deployment/default/triton: spec.template.spec.tolerations.0: Additional properties are not "
        "allowed ('effectt'",
    ):
        assert f"error: {tmp_path / expected}" in err, err
    assert stdout.startswith("3 models, 1 server: 4 errors")


def test_a_model_whose_server_is_elsewhere_warns_and_import_then_render_of_it_alone_works(tmp_path: Path) -> None:
    folder = tmp_path / "add_sub"
    folder.mkdir()
    (folder / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 4\ninput [{ name: "A" data_type: TYPE_FP32 dims: [ 2 ] }]\n'
        'output [{ name: "B" data_type: TYPE_FP32 dims: [ 2 ] }]\n'
    )
    code, imported, err = run("import", str(folder))  # a model folder names its config.pbtxt
    assert code == 0, err
    model = tmp_path / "model.yaml"
    model.write_text(imported)
    code, stdout, err = run("validate", str(model))
    assert code == 0
    err = without_lines(err)
    assert f"warning: {model}: TritonModel/default/add-sub: spec.serverRef.name: no TritonServer 'triton'" in err
    assert "not against the server" in err and "give the server's file too" in err
    assert stdout == "1 model, 0 servers: 0 errors, 1 warning\n"
    code, _, err = run("render", str(model), "--out", str(tmp_path / "out"))
    assert code == 0, err
    assert 'backend: "python"' in (tmp_path / "out/add_sub/config.pbtxt").read_text()


@pytest.mark.parametrize(
    "server",
    [SERVER + "spec: {replicas: -1}\n", SERVER.replace("v1alpha1", "v1")],
    ids=["invalid-spec", "unknown-version"],
)
def test_a_model_whose_server_is_refused_is_told_so_not_that_the_server_is_missing(server: str, tmp_path: Path) -> None:
    """The server's file was given: advice to give it would send the user looking for the wrong thing."""
    (tmp_path / "server.yaml").write_text(server)
    model = tmp_path / "model.yaml"
    model.write_text(MODEL)
    code, _, err = run("validate", str(tmp_path))
    assert code == 1
    err = without_lines(err)
    warning = (
        f"warning: {model}: TritonModel/default/m: spec.serverRef.name: TritonServer 'triton' in namespace "
        "'default' is refused for its errors"
    )
    assert warning in err and "fix the server" in err, err
    assert "no TritonServer" not in err and "give the server's file" not in err
    with pytest.raises(
        LocalModeError, match=r"the TritonServer in the files is refused for the errors above \(triton\)"
    ):
        choose_server(load([str(tmp_path)]).fleet, None)  # local mode says the same, not "no TritonServer"


SUMMARY_LINE = re.compile(r"\d+ models?, \d+ servers?(, \d+ ignored)?: \d+ errors?, \d+ warnings?")


def test_the_docs_give_the_exit_codes_and_the_summary_line_as_validate_prints_it() -> None:
    """docs/cli.md's exit codes and summary line, README's short ones, and the examples' summary line the
    README's tour quotes, which must be what `validate examples/` prints."""
    page = (ROOT / "docs/cli.md").read_text()
    readme = (ROOT / "README.md").read_text()
    [example] = re.findall(r"ends with a summary line on stdout, e\.g\. `([^`]+)`", page)
    assert SUMMARY_LINE.fullmatch(example)
    code, stdout, _ = run("validate", str(EXAMPLES))
    assert code == 0 and SUMMARY_LINE.fullmatch(stdout.strip()), stdout
    assert f"`{stdout.strip()}` for the examples" in readme
    for text in (page, readme):
        exit_codes = text[text.index("Exit codes, for every command:") :].split("\n\n")[0]
        for code, meaning in ((0, "done"), (1, "the input has errors"), (2, "the command could not run")):
            assert f"**{code}** {meaning}" in exit_codes, (exit_codes, code)


def test_render_is_deterministic_without_a_control_key(tmp_path: Path) -> None:
    outputs = []
    for run_number in range(2):
        out = tmp_path / f"out{run_number}"
        assert run("render", str(EXAMPLES), "--out", str(out))[0] == 0
        outputs.append((out / "manifests.yaml").read_text())
    assert outputs[0] == outputs[1]
    secrets = [o for o in yaml.safe_load_all(outputs[0]) if o["kind"] == "Secret"]
    assert [s["metadata"]["name"] for s in secrets] == ["triton-control", "triton-shm"]
    assert all(
        "data" not in s and s["metadata"]["annotations"] == {"triton-operator.io/key": "filled-by-operator"}
        for s in secrets
    )


def test_an_unexpected_error_is_one_line_and_exit_2_and_debug_shows_the_traceback(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, _, err = run("render", str(EXAMPLES), "--out", str(blocker / "out"))  # --out below a file
    assert code == 2 and "Traceback" not in err
    errors = [line for line in err.splitlines() if not line.startswith("ignored: ")]  # other kinds are listed
    assert len(errors) == 1 and errors[0].startswith("triton-operator render: unexpected error:")
    code, _, err = run("--debug", "render", str(EXAMPLES), "--out", str(blocker / "out"))
    assert code == 2 and "Traceback" in err


def test_import_of_missing_binary_or_folder_without_config_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "binary.pbtxt").write_bytes(b"\xff\xfe\x00")
    for path, words in (
        (tmp_path / "nope.pbtxt", "no such file"),
        (tmp_path / "binary.pbtxt", "not UTF-8"),
        (tmp_path, "no model folder (a folder with a config.pbtxt or a version folder) in it"),
    ):
        code, out, err = run("import", str(path))
        assert_no_crash(code, err)
        assert code == 1 and words in err and out == ""


# What the API server refuses on its own (schema and CEL), as Python does.
BOUNDS = [
    ("TritonServer", {"pythonBackend": {"shmDefaultBytes": "1e30"}}),
    ("TritonServer", {"pythonBackend": {"shmGrowthBytes": "99999999Ti"}}),
    ("TritonServer", {"memoryPools": {"pinnedBytes": "8Ei"}}),
    ("TritonServer", {"sharedMemory": {"sizeLimit": "1e30"}}),
    ("TritonServer", {"resources": {"requests": {"cpu": "one"}}}),
    ("TritonServer", {"resources": {"limits": {"memory": "lots"}}}),
    ("TritonServer", {"resources": {"limits": {"memory": "400m"}}}),
    ("TritonServer", {"resources": {"limits": {"nvidia.com/gpu": "0.5"}}}),
    ("TritonServer", {"extraArgs": ["--log-verbose=1"]}),
    ("TritonServer", {"extraArgs": ["--backend-config=python,shm-default-byte-size=1048576"]}),
    ("TritonModel", {"sharedMemory": {"executionBytes": "1e30"}}),
    ("TritonModel", {"sharedMemory": {"clientPool": {"regions": 1, "regionBytes": "-1Mi"}}}),
]
ACCEPTED = [
    ("TritonServer", {"pythonBackend": {"shmDefaultBytes": "7Ei", "shmGrowthBytes": 9223372036854775807}}),
    ("TritonServer", {"memoryPools": {"pinnedBytes": "1.5Gi"}, "sharedMemory": {"sizeLimit": "1e9"}}),
    (
        "TritonServer",
        {
            "resources": {
                "requests": {"cpu": "500m", "memory": "512Mi"},
                "limits": {"cpu": 2, "memory": "1Gi", "nvidia.com/gpu": 1},
            }
        },
    ),
    ("TritonServer", {"extraArgs": ["--backend-config=python,shm-region-prefix-name=x", "--log-file=/tmp/t.log"]}),
]


def _document(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    base = {"serverRef": {"name": "triton"}, "config": {"backend": "python"}} if kind == "TritonModel" else {}
    return {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": "x"},
        "spec": {**base, **spec},
    }


@pytest.mark.parametrize(("kind", "spec"), BOUNDS, ids=[str(spec) for _, spec in BOUNDS])
def test_the_crd_and_python_refuse_bounds_and_quantities(kind: str, spec: dict[str, Any]) -> None:
    document = _document(kind, spec)
    assert crd_errors(document), "the API server would accept it"
    servers, models, findings = parse_resources([document])
    assert servers == models == [] and findings


@pytest.mark.parametrize(("kind", "spec"), ACCEPTED, ids=[str(spec) for _, spec in ACCEPTED])
def test_the_crd_and_python_accept_what_is_in_bounds(kind: str, spec: dict[str, Any]) -> None:
    document = _document(kind, spec)
    assert crd_errors(document) == []
    assert parse_resources([document])[2] == []


# Hypothesis: the examples with one value replaced by something else, and plain random bytes.
EXAMPLE_DOCUMENTS = example_documents()


def _check_every_command(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "input.yaml"
        path.write_bytes(content)
        for argv in (["validate", str(path)], ["render", str(path), "--out", f"{folder}/out"], ["import", str(path)]):
            code, _, err = run(*argv)
            assert_no_crash(code, err)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=mutated(EXAMPLE_DOCUMENTS))
def test_mutated_examples_never_crash(documents: list[Any]) -> None:
    _check_every_command(yaml.safe_dump_all(documents).encode())


@settings(max_examples=40, deadline=None)
@given(content=st.binary(max_size=300))
def test_random_bytes_never_crash(content: bytes) -> None:
    _check_every_command(content)


def test_a_dev_shm_no_node_has_is_warned_with_the_model_that_asks_for_it(tmp_path: Path) -> None:
    """Two billion instances fit Triton's int32 count and Kubernetes' int64 quantities: only the size tells."""
    for name in ("server.yaml", "add-sub.yaml"):
        (tmp_path / name).write_text(
            (EXAMPLES / name).read_text().replace("{kind: KIND_CPU, count: 2}", "{kind: KIND_CPU, count: 2000000000}")
        )
    code, stdout, err = run("validate", str(tmp_path))
    assert code == 0 and stdout.strip().endswith("0 errors, 1 warning"), stdout + err
    assert "spec.sharedMemory: /dev/shm comes to" in err and "model 'add_sub'" in err and "instanceGroup counts" in err
    assert "comes to" not in run("validate", str(EXAMPLES))[2]  # the examples' few MiB are no warning


def test_a_large_dev_shm_set_by_hand_is_taken_as_meant(tmp_path: Path) -> None:
    server = (EXAMPLES / "server.yaml").read_text().replace("sizeLimit: auto", "sizeLimit: 1Ti")
    (tmp_path / "server.yaml").write_text(server)
    assert run("validate", str(tmp_path)) == (0, "0 models, 1 server: 0 errors, 0 warnings\n", "")
    (tmp_path / "add-sub.yaml").write_text((EXAMPLES / "add-sub.yaml").read_text())
    code, _, err = run("validate", str(tmp_path))
    assert code == 0 and "comes to" not in err, err
