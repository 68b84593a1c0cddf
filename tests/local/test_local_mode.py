"""`triton-operator local` end to end: a real tritonserver, the example CRs, edits to the files,
and nothing left behind (no process, no /dev/shm region) once it stops."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from tests.conftest import EXAMPLES, ROOT
from tests.support.local_mode import SHM, Output, local_command, processes_using
from tests.support.mutations import mutated
from triton_operator.api.resources import read_documents
from triton_operator.api.server import TritonServerSpec
from triton_operator.local.local_state import KEPT
from triton_operator.local.tritonserver import LocalTriton
from triton_operator.protocol.names import CONTROL_HEADER

pytestmark = pytest.mark.triton

# Local-mode processes this test started: their Triton's shm regions are named after their pid.
# Other people's tritonservers on this machine make and remove regions of their own meanwhile.
_started: list[int] = []


def _local(command: list[str], **popen: Any) -> subprocess.Popen[Any]:
    """Local mode in a process group of its own: only the test's SIGTERM stops it, and it stops cleanly."""
    process = subprocess.Popen(command, cwd=ROOT, start_new_session=True, **popen)
    _started.append(process.pid)
    return process


@pytest.fixture
def clean_host(tmp_path: Path) -> Iterator[Path]:
    """A work folder; afterwards no process runs from it and /dev/shm has no region of ours left."""
    _started.clear()
    workdir = tmp_path / "work"
    yield workdir
    assert processes_using(workdir) == []
    ours = tuple(f"triton_operator_{pid}_" for pid in _started)
    assert [name for name in os.listdir(SHM) if name.startswith(ours)] == []


def test_once_serves_every_example_and_answers_a_sample(clean_host: Path) -> None:
    # With a control key Triton restricts its control API; the sync must still get through.
    command = local_command([EXAMPLES], clean_host, "--once", "--control-key", "local-secret")
    process = _local(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stdout + stderr
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("MODEL"))
    rows = {line.split()[0]: line.split() for line in lines[header + 1 : header + 5]}
    assert sorted(rows) == ["add_sub", "python_batched_service", "shm_scale", "warm_identity"]
    assert all(row[1] == "READY" and row[2] == "1" for row in rows.values())
    for model in rows:
        assert any(line.startswith(f"sample {model}: ok:") for line in lines), stdout
    assert "stopping tritonserver" in last_line(lines)
    assert any(
        line.startswith("starting tritonserver for TritonServer/triton (") and line.endswith(", no GPU)")
        for line in lines
    ), stdout


def last_line(lines: list[str]) -> str:
    """The last line but for the clean-up after Triton's exit: a stub process still ending when Triton
    has exited (seen on a busy machine) leaves its region, which local mode removes and says so."""
    return next(line for line in reversed(lines) if "removing a shared-memory region Triton left behind" not in line)


def _watch_examples(tmp_path: Path, workdir: Path) -> tuple[Path, subprocess.Popen[bytes], Output]:
    """`local` watching a copy of the examples, its output going to a log (`output.path`)."""
    crs = tmp_path / "crs"
    shutil.copytree(EXAMPLES, crs)
    log = tmp_path / "out.log"
    with log.open("w") as out:
        process = _local(local_command([crs], workdir), stdout=out, stderr=subprocess.STDOUT)
    return crs, process, Output(log)


def _flag(process: subprocess.Popen[bytes], name: str) -> str:
    return _flag_of(process.args, name)  # type: ignore[arg-type]


def _flag_of(command: list[str], name: str) -> str:
    return str(command[command.index(name) + 1])


def test_watch_reloads_edits_keeps_broken_models_unloads_removed_ones(tmp_path: Path, clean_host: Path) -> None:
    crs, process, output = _watch_examples(tmp_path, clean_host)
    http_port, log = _flag(process, "--http-port"), output.path
    try:
        at = output.wait_for("watching the files")
        # Without --control-key the control API answers to the key local made and saved; shared memory stays open.
        key = (clean_host / "control-key").read_text().strip()
        index = urllib.request.Request(
            f"http://127.0.0.1:{http_port}/v2/repository/index",
            data=b"{}",
            headers={CONTROL_HEADER: key},
            method="POST",
        )
        with urllib.request.urlopen(index, timeout=5) as response:
            assert response.status == 200
        port = _flag(process, "--grpc-port")
        client = subprocess.run(
            [sys.executable, str(EXAMPLES / "clients/shm_client.py"), f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert client.returncode == 0 and "16/16 requests" in client.stdout, client.stdout + client.stderr

        add_sub = crs / "add-sub.yaml"
        add_sub.write_text(add_sub.read_text().replace("{kind: KIND_CPU, count: 2}", "{kind: KIND_CPU, count: 1}"))
        at = output.wait_for("reload add_sub: done", at)

        ragged = crs / "ragged.yaml"  # allowRaggedBatch without batching: refused, the old version stays
        ragged.write_text(ragged.read_text().replace("maxBatchSize: 16", "maxBatchSize: 0"))
        at = output.wait_for("set maxBatchSize > 0", at)
        at = output.wait_for("python_batched_service  READY", at)

        (crs / "warmup.yaml").unlink()
        at = output.wait_for("unload warm_identity: done", at)
        text = log.read_text()
        assert "unloading python_batched_service" not in text
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()
    assert "stopping tritonserver" in last_line(log.read_text().splitlines())


def _infer_add_sub(http_port: str) -> dict[str, object]:
    """One request to add_sub over HTTP: the model answers, whatever its file looks like now."""
    inputs = [
        {"name": name, "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]} for name in ("INPUT0", "INPUT1")
    ]
    request = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/v2/models/add_sub/infer",
        data=json.dumps({"inputs": inputs}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _tritonserver_pid(workdir: Path) -> int:
    [pid] = [int(line.split(":")[0]) for line in processes_using(workdir) if "bin/tritonserver " in line]
    return pid


def test_broken_files_keep_serving_a_busy_port_is_refused_and_a_dead_triton_is_reported(
    tmp_path: Path, clean_host: Path
) -> None:
    crs, process, output = _watch_examples(tmp_path, clean_host)
    copies: set[Path] = set()
    http_port, log = _flag(process, "--http-port"), output.path
    try:
        at = output.wait_for("watching the files")

        # A second local mode on the same ports must not drive this one's Triton.
        second = [*process.args[:-2], "--workdir", str(tmp_path / "second"), "--once"]
        refused = _local(second, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stdout, stderr = refused.communicate(timeout=120)
        assert refused.returncode == 2, stdout + stderr
        assert f"port {http_port} (http) is in use" in stderr and "--http-port" in stderr
        assert "Traceback" not in stderr and "READY" not in stdout

        add_sub = crs / "add-sub.yaml"
        good = add_sub.read_text()
        for broken in (b"kind: TritonModel\nmetadata: {name: x\n", b"\xff\xfe not text", b"- a list\n"):
            add_sub.write_bytes(broken)
            at = output.wait_for(str(add_sub), at)
            at = output.wait_for("add_sub", at)
            at = output.wait_for("its file is refused (see above): the last good version keeps serving", at)
            assert _infer_add_sub(http_port)["outputs"], "the last good add_sub still answers"
        add_sub.write_text(good.replace("{kind: KIND_CPU, count: 2}", "{kind: KIND_CPU, count: 1}"))
        at = output.wait_for("reload add_sub: done", at)

        # Triton copies models loaded with files into /tmp/folder*; killed, it cannot remove them.
        copies = {Path(m) for line in processes_using(clean_host) for m in re.findall(r"/tmp/folder\w+", line)}
        os.kill(_tritonserver_pid(clean_host), signal.SIGKILL)
        assert process.wait(timeout=60) == 2, log.read_text()
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    for copy in copies:
        shutil.rmtree(copy, ignore_errors=True)
    text = log.read_text()
    assert "tritonserver exited with signal 9 (SIGKILL); the end of its log" in text and "Traceback" not in text


def _next_line(lines: queue.Queue[tuple[float, str]], text: str, output: list[str], timeout: float = 60) -> float:
    """When the next line holding `text` came out of local mode (read as it is written, no polling)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            at, line = lines.get(timeout=max(deadline - time.monotonic(), 0))
        except queue.Empty:
            raise AssertionError(f"{text!r} did not appear:\n{''.join(output)}") from None
        output.append(line)
        if text in line:
            return at


def test_an_edit_is_acted_on_as_it_is_saved_not_at_the_next_poll(tmp_path: Path, clean_host: Path) -> None:
    # Polling every second noticed a save 0.5 s later on average, and five saves in a row all within
    # 0.4 s once in a hundred runs; watched files are noticed as they are saved.
    crs = tmp_path / "crs"
    shutil.copytree(EXAMPLES, crs)
    process = _local(local_command([crs], clean_host), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[tuple[float, str]] = queue.Queue()
    reader = threading.Thread(
        target=lambda: [lines.put((time.monotonic(), line)) for line in process.stdout], daemon=True
    )  # type: ignore[union-attr]
    reader.start()
    output: list[str] = []
    add_sub = crs / "add-sub.yaml"
    delays = []
    try:
        _next_line(lines, "watching the files", output, timeout=300)
        for edit in range(5):
            saved = time.monotonic()
            add_sub.write_text(add_sub.read_text() + f"# edit {edit}: a comment, so nothing is reloaded\n")
            delays.append(_next_line(lines, "files changed", output) - saved)
            _next_line(lines, "add_sub ", output)  # its row in the table: this sync is over
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        reader.join(timeout=10)
    assert max(delays) < 0.4, f"seconds from save to 'files changed': {[round(d, 3) for d in delays]}"
    assert not any("reload" in line for line in output), "a comment changes no config"


def test_a_tritonserver_that_exits_at_start_is_reported_with_its_status_and_why(
    tmp_path: Path, clean_host: Path
) -> None:
    """Triton refuses a flag with one line and then its usage: the line must be what is shown."""
    crs = tmp_path / "crs"
    crs.mkdir()
    server = (EXAMPLES / "server.yaml").read_text()
    (crs / "server.yaml").write_text(
        server.replace("  replicas: 2\n", "  replicas: 2\n  extraArgs: [--no-such-flag]\n")
    )
    process = _local(
        local_command([crs], clean_host, "--once"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 2, stdout + stderr
    assert "tritonserver exited with status 1; the end of its log" in stderr
    assert "unrecognized option '--no-such-flag'" in stderr and "Usage" not in stderr and "Traceback" not in stderr


GOOD_ADD_SUB = (EXAMPLES / "add-sub.yaml").read_bytes()
# What a person's editor or a bad merge may leave in a watched file.
BAD_WRITES = st.one_of(
    mutated(read_documents(GOOD_ADD_SUB.decode())).map(lambda documents: yaml.safe_dump_all(documents).encode()),
    st.integers(min_value=0, max_value=len(GOOD_ADD_SUB) - 1).map(lambda length: GOOD_ADD_SUB[:length]),
    st.binary(max_size=300),
)
# Edits after which the file no longer names the model it held (metadata a string; a new name with
# a broken spec): the file is refused all the same, and the last good add_sub keeps serving.
UNNAMED_ADD_SUB = GOOD_ADD_SUB.replace(b"metadata:\n  name: add-sub\nspec:", b"metadata: add-sub\nspec:")
RENAMED_BROKEN_ADD_SUB = GOOD_ADD_SUB.replace(b"name: add-sub\nspec:", b"name: renamed\nspec:").replace(
    b"maxBatchSize: 8", b"maxBatchSize: -1"
)
# A load or unload of add_sub in local mode's output, and whether Triton took it.
ADD_SUB_ACTION = re.compile(r"^  (?:load|reload|unload) add_sub: (done|FAILED)", re.MULTILINE)
ERROR_FINDING = re.compile(r"^error: ", re.MULTILINE)


def _assert_add_sub_adds(http_port: str) -> None:
    outputs = {output["name"]: output["data"] for output in _infer_add_sub(http_port)["outputs"]}
    assert outputs == {"OUTPUT0": [2, 4, 6, 8], "OUTPUT1": [0, 0, 0, 0]}


def test_a_stream_of_bad_writes_never_stops_local_and_the_last_good_add_sub_keeps_answering(
    tmp_path: Path, clean_host: Path
) -> None:
    """Mutated CRs, truncated YAML and random bytes written one after another into a watched file."""
    crs, process, output = _watch_examples(tmp_path, clean_host)
    http_port, add_sub = _flag(process, "--http-port"), crs / "add-sub.yaml"
    at = output.wait_for("watching the files")

    def write(content: bytes) -> str:
        """Local mode's output about this write, once it has handled it (synced, or kept what runs)."""
        nonlocal at
        add_sub.write_bytes(content)
        start = output.wait_for("files changed", at)
        at = output.wait_for_first(("\nMODEL ", "keeping what runs"), start)
        text = output.path.read_text()
        assert process.poll() is None and "Traceback" not in text, text[start:]
        return text[start:at]

    def add_sub_row() -> str:
        """add_sub's row of the table printed for the last write."""
        row_start = output.wait_for("\nadd_sub ", at)
        return output.path.read_text()[row_start : output.wait_for("\n", row_start)]

    # The same writes on every run; no shrinking, as each example is a write to a running server.
    @settings(max_examples=20, deadline=None, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate])
    @given(content=BAD_WRITES)
    @example(content=UNNAMED_ADD_SUB)
    @example(content=RENAMED_BROKEN_ADD_SUB)
    def each_write(content: bytes) -> None:
        handled = write(content)
        outcomes = ADD_SUB_ACTION.findall(handled)
        if ERROR_FINDING.search(handled):  # the file is refused: add_sub is left as it runs
            assert outcomes == [], handled
        if "done" not in outcomes:  # refused, or Triton refused the load: the version before keeps serving
            _assert_add_sub_adds(http_port)
        if (
            outcomes
        ):  # the file is valid and says a new version, or none: back to the good file, whose answers are known
            write(GOOD_ADD_SUB)
            _assert_add_sub_adds(http_port)

    try:
        each_write()
        write(UNNAMED_ADD_SUB)
        assert KEPT in add_sub_row()
        write(GOOD_ADD_SUB)
        row = add_sub_row()
        assert row.split()[0] == "READY" and KEPT not in row, "the good file is taken again, no longer marked refused"
        _assert_add_sub_adds(http_port)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=90) == 0, output.path.read_text()[-3000:]


def test_a_folder_moved_in_or_out_a_failed_reload_in_one_line_and_a_prompt_stop(
    tmp_path: Path, clean_host: Path
) -> None:
    """A model's folder moved out of the watched folder unloads it, moved back loads it; a reload Triton
    refuses with a traceback is one line in the table, the whole text printed once; and stopping after
    it does not wait out Triton's exit timeout for models that never finish."""
    crs, process, output = _watch_examples(tmp_path, clean_host)
    folder = crs / "add-sub"
    folder.mkdir()
    (crs / "add-sub.yaml").rename(folder / "add-sub.yaml")  # before local reads it: the model starts in a subfolder
    try:
        at = output.wait_for("watching the files")
        assert "\nadd_sub " in output.path.read_text()
        outside = tmp_path / "outside"
        folder.rename(outside)
        at = output.wait_for("unload add_sub: done", at)
        outside.rename(folder)
        at = output.wait_for("load add_sub: done", at)

        model = folder / "add-sub.yaml"
        model.write_text(
            model.read_text().replace(
                "    class TritonPythonModel:\n",
                "    class TritonPythonModel:\n"
                "        def initialize(self, args):\n            raise RuntimeError('no weights here')\n\n",
            )
        )
        at = output.wait_for("reload add_sub: FAILED", at)
        at = output.wait_for("\nadd_sub ", at)
        row = output.path.read_text()[at : output.wait_for("\n", at)]
        assert row.split()[0] == "READY" and "[whole error below]" in row, row  # the old version serves on
        (crs / "server.yaml").write_text((crs / "server.yaml").read_text() + "# a comment: the table once more\n")
        at = output.wait_for("files changed", at)
        output.wait_for("\nadd_sub ", at)
    finally:
        process.send_signal(signal.SIGTERM)
        stopping = time.monotonic()
        assert process.wait(timeout=90) == 0, output.path.read_text()[-3000:]
    stopped = time.monotonic() - stopping
    text = output.path.read_text()
    rows = [
        line
        for line in text.splitlines()
        if line.startswith("add_sub ") and "RuntimeError: no weights here [whole error below]" in line
    ]
    assert len(rows) == 2, text  # one line in each table
    assert text.count("model.py(") == 1 and text.count("\nadd_sub: load failed for model 'add_sub'") == 1, (
        text
    )  # the whole error: once
    assert stopped < 10, f"{stopped:.1f}s to stop after a failed reload"


def test_one_port_for_two_of_triton_s_servers_is_refused_naming_both_flags(tmp_path: Path, clean_host: Path) -> None:
    command = local_command([EXAMPLES], clean_host, "--once")
    port = _flag_of(command, "--http-port")
    command[command.index("--grpc-port") + 1] = port
    process = _local(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 2, stdout + stderr
    assert stderr.splitlines() == [
        f"triton-operator local: --http-port and --grpc-port are both {port}: give each its own port"
    ]


def test_the_reason_triton_gives_after_its_usage_text_is_shown(tmp_path: Path) -> None:
    """Flags that do not go together are refused after the usage text: the tail keeps what follows it."""
    triton = LocalTriton(TritonServerSpec(), tmp_path)
    reason = "The server cannot listen to HTTP requests and GRPC requests at the same address and port 127.0.0.1:8000"
    usage = (
        "Usage: tritonserver [options]\n  --help\n\tPrint usage\n\n"
        "Server:\n  --id <string>\n\tIdentifier for this server.\n\n"
    )
    triton.log_path.write_text(usage + reason + "\n")
    assert triton.log_tail() == reason + "\n"
    triton.log_path.write_text("E1123 error: unrecognized option '--no-such-flag'\n" + usage)
    assert triton.log_tail() == "E1123 error: unrecognized option '--no-such-flag'\n"


@pytest.mark.triton
def test_ctrl_c_stops_local_mode_while_a_model_loads(tmp_path: Path) -> None:
    """A load may take minutes; Ctrl-C is answered at once, and Triton with its loading stub goes too."""
    from tests.support.models import add_code
    from tests.support.resources import FILES, MODEL, SERVER

    slow_files = {**FILES, "data": {"model.py": add_code(initialize="time.sleep(300)").decode()}}
    (tmp_path / "slow.yaml").write_text(yaml.safe_dump_all([SERVER, slow_files, MODEL]))
    log = tmp_path / "local.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            local_command([tmp_path / "slow.yaml"], tmp_path / "work"),
            cwd=ROOT,
            start_new_session=True,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        Output(log).wait_for("loading add ...", timeout=120)
        asked = time.monotonic()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0, log.read_text()[-2000:]
        assert time.monotonic() - asked < 15, log.read_text()[-2000:]
    finally:
        if process.poll() is None:  # it did not stop: end it and the tritonserver it started, by pid
            process.kill()
            process.wait()
            for found in processes_using(tmp_path / "work"):
                os.kill(int(found.split(":")[0]), signal.SIGKILL)
    assert processes_using(tmp_path / "work") == []


def test_local_serves_the_models_that_placement_puts_on_the_server_it_runs(tmp_path: Path, clean_host: Path) -> None:
    """Two servers' files and models with a serverSelector: `local --server b` serves what the operator's
    rule places on b, and `place` shows the same placement."""
    crs = tmp_path / "crs"
    crs.mkdir()
    documents = read_documents(GOOD_ADD_SUB.decode())
    files = next(d for d in documents if d["kind"] == "ConfigMap")
    model = next(d for d in documents if d["kind"] == "TritonModel")
    servers = [
        {
            "apiVersion": model["apiVersion"],
            "kind": "TritonServer",
            "metadata": {"name": name, "labels": {"pool": "cpu"}},
            "spec": {"backends": ["python"], "capacity": {"memory": "100Mi"}},
        }
        for name in ("a", "b")
    ]
    placed = []
    for index in range(2):  # 60Mi each: one per server, a first (a tie goes by name)
        selected = yaml.safe_load(yaml.safe_dump(model))
        selected["metadata"] = {"name": f"add-sub-{index}"}
        selected["spec"].pop("serverRef", None)
        selected["spec"].update(
            serverSelector={"matchLabels": {"pool": "cpu"}}, memory={"cpu": "60Mi"}, modelName=f"add_sub_{index}"
        )
        placed.append(selected)
    (crs / "fleet.yaml").write_text(yaml.safe_dump_all([*servers, files, *placed]))
    place = subprocess.run(
        [sys.executable, "-m", "triton_operator.cli", "place", str(crs), "-o", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert place.returncode == 0, place.stderr
    assert {m["name"]: m["server"] for m in json.loads(place.stdout)["models"]} == {"add-sub-0": "a", "add-sub-1": "b"}
    process = _local(
        local_command([crs], clean_host, "--once", "--server", "b"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stdout + stderr
    assert "load add_sub_1: done" in stdout and "add_sub_0" not in stdout
