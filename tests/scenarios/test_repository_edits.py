"""Edits of a model that the server's model repository also holds, as a folder of the same name: a user's
repository imported as CRs (the ConfigMap copy serves) and mounted as the server's repository, or served
by `local --model-repository` as the source itself. An edit reloads in place and a broken edit keeps the
old version serving; clients see no failed request through either."""

from __future__ import annotations

import asyncio
import copy
import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from google.protobuf import json_format, text_format

from tests.conftest import ROOT
from tests.scenarios.test_operator import FAILING_CODE, loaded_condition
from tests.support.cli import run
from tests.support.local_mode import Output, local_command
from tests.support.models import ADD_CONFIG, add_code
from tests.support.models import python_model as desired
from tests.support.operator import Pods, api_server, running_operator
from tests.support.ports import free_ports
from tests.support.repository import LABELS, write_repository
from tests.support.resources import FILES, MODEL, SERVER
from tests.support.serving import RequestLoop, infer, model_ready_at
from triton_operator.api.server import TritonServerSpec
from triton_operator.local.tritonserver import LocalTriton, Ports
from triton_operator.protocol.triton_proto import model_config_pb2
from triton_operator.triton.client import ControlClient, ModelState
from triton_operator.triton.sync import Replica

pytestmark = pytest.mark.triton

BROKEN = "\ndef broken(:\n"  # a syntax error appended to model.py


class LabelLoop:
    """A client asking `labels` for its label 0 over and over; what it got and what failed."""

    def __init__(self, grpc_url: str):
        self.grpc_url = grpc_url
        self.stop = threading.Event()
        self.answers: list[bytes] = []
        self.failures: list[str] = []
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        client = grpcclient.InferenceServerClient(self.grpc_url)
        tensor = grpcclient.InferInput("INDEX", [1], "INT32")
        tensor.set_data_from_numpy(np.array([0], np.int32))
        try:
            while not self.stop.is_set():
                try:
                    self.answers.append(client.infer("labels", [tensor]).as_numpy("LABEL")[0])
                except Exception as error:  # every failure is what the test counts
                    self.failures.append(str(error))
        finally:
            client.close()

    def wait_for_answers(self, count: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while len(self.answers) < count and not self.failures:
            assert time.monotonic() < deadline, f"{len(self.answers)} answers, not {count}"
            time.sleep(0.05)

    def __enter__(self) -> LabelLoop:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def _local(args: list[Path], repository: Path, workdir: Path, log: Path) -> tuple[subprocess.Popen[bytes], Output, str]:
    command = local_command(args, workdir, "--model-repository", str(repository))
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=ROOT, start_new_session=True, stdout=out, stderr=subprocess.STDOUT)
    output = Output(log)
    output.wait_for("watching the files", timeout=300)
    return process, output, f"127.0.0.1:{command[command.index('--grpc-port') + 1]}"


@pytest.fixture
def stopped() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The local-mode processes a test started, stopped (SIGTERM, by their pid) at its end."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0


def _row(output: Output, model: str, after: int) -> str:
    """The model's row in the last table printed after `after`."""
    rows = [line for line in output.path.read_text()[after:].splitlines() if line.startswith(f"{model} ")]
    return rows[-1] if rows else ""


def test_imported_models_keep_serving_through_re_imports_an_emptied_file_and_a_broken_edit(
    tmp_path: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    models = write_repository(tmp_path / "models")
    crs = tmp_path / "crs"
    assert run("import", str(models), "--out", str(crs))[0] == 0
    process, output, grpc_url = _local([crs], models, tmp_path / "work", tmp_path / "local.log")
    stopped.append(process)
    code = models / "labels" / "1" / "model.py"
    with LabelLoop(grpc_url) as loop:
        # An edit and a re-import, as docs/own-repository.md says: the new code serves.
        code.write_text(code.read_text().replace("splitlines()", "splitlines()[1:]"))
        at = len(output.path.read_text())
        assert run("import", str(models), "--out", str(crs))[0] == 0
        at = output.wait_for("reload labels: done", after=at, timeout=120)
        # A writer that empties the file first (an editor saving in place) is seen mid-save: nothing unloads.
        document = (crs / "labels.yaml").read_text()
        (crs / "labels.yaml").write_text("")
        at = output.wait_for("(local mode keeps serving what it held", after=at)
        (crs / "labels.yaml").write_text(document)
        # A syntax error: the reload fails and the last good version serves.
        code.write_text(code.read_text() + BROKEN)
        assert run("import", str(models), "--out", str(crs))[0] == 0
        at = output.wait_for("reload labels: FAILED", after=at, timeout=120)
        output.wait_for("\nlabels ", after=at)
        answered = len(loop.answers)
        loop.wait_for_answers(answered + 20)  # the server is asked again after the failure
    log = output.path.read_text()
    assert "unloading labels" not in log, log
    assert loop.failures == [], loop.failures[:3]
    assert loop.answers[-1] == LABELS.splitlines()[1].encode() and len(loop.answers) > answered, loop.answers[-3:]
    assert _row(output, "labels", at).split()[1] == "READY"


def test_the_repository_itself_is_the_source(tmp_path: Path, stopped: list[subprocess.Popen[bytes]]) -> None:
    models = write_repository(tmp_path / "models")
    crs = tmp_path / "crs"
    crs.mkdir()
    # One model is named by a CR too: the CR's config is what serves it (the cluster's), the folder's not.
    assert run("import", str(models / "add_sub"), "--out", str(crs))[0] == 0
    process, output, grpc_url = _local([crs], models, tmp_path / "work", tmp_path / "local.log")
    stopped.append(process)
    table = output.path.read_text()
    assert _row(output, "labels", 0).split()[6] == str(models / "labels"), table
    assert _row(output, "add_sub", 0).split()[6] == str(crs / "add-sub.yaml"), table
    labels_txt, code = models / "labels" / "1" / "labels.txt", models / "labels" / "1" / "model.py"
    good = code.read_text()
    with LabelLoop(grpc_url) as loop:
        # An edit of a file beside model.py reloads the model in place, with no import and no CR.
        labels_txt.write_text("lynx\n" + LABELS)
        at = output.wait_for("reload labels: done", timeout=120)
        # A syntax error keeps the last good version; saving the same broken file again tries it again.
        code.write_text(good + BROKEN)
        at = output.wait_for("reload labels: FAILED", after=at, timeout=120)
        code.write_text(good + BROKEN)
        at = output.wait_for("reload labels: FAILED", after=at, timeout=120)
        code.write_text(good + "# fixed\n")
        at = output.wait_for("reload labels: done", after=at, timeout=120)
    assert loop.failures == [], loop.failures[:3]
    assert b"lynx" in loop.answers and loop.answers[-1] == b"lynx", loop.answers[-3:]
    # A new folder loads, a removed one unloads.
    (tmp_path / "labels2").mkdir()
    for path in (models / "labels").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            target = tmp_path / "labels2" / path.relative_to(models / "labels")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes().replace(b'"labels"', b'"labels2"'))
    (tmp_path / "labels2").rename(models / "labels2")
    at = output.wait_for("load labels2: done", after=at, timeout=120)
    shutil.rmtree(models / "square_int32")
    at = output.wait_for("unload square_int32: done", after=at, timeout=120)
    output.wait_for("\nlabels2 ", after=at)
    assert _row(output, "square_int32", at) == ""


async def test_the_operator_keeps_a_model_its_pods_repository_also_holds_serving_through_edits(tmp_path: Path) -> None:
    # What the server's PVC holds: the model's own folder, as the user had it before importing it.
    repository = tmp_path / "repository"
    (repository / "add" / "1").mkdir(parents=True)
    (repository / "add" / "1" / "model.py").write_bytes(add_code())
    (repository / "add" / "config.pbtxt").write_text(_pbtxt("add", ADD_CONFIG))
    pods = Pods(tmp_path / "pods", model_repository=repository)
    server = copy.deepcopy(SERVER)
    server["spec"]["modelRepository"] = {"pvc": {"claimName": "models"}}
    try:
        async with api_server() as cluster, running_operator(cluster, resync_seconds=1):
            for obj in (server, FILES, MODEL):
                await cluster.create(copy.deepcopy(obj))
            key = await cluster.wait("the control key", lambda: cluster.control_key("triton"))
            tritons = [pods.start(name, key) for name in ("triton-a", "triton-b")]  # both mount the one repository
            for name, triton in zip(("triton-a", "triton-b"), tritons, strict=False):
                await cluster.add_pod("triton", name, triton.address, triton.ports.grpc)
            status = await cluster.wait("loaded", lambda: model_ready_at(cluster))
            with RequestLoop([triton.grpc_url for triton in tritons]) as loop:
                await cluster.patch("ConfigMap", "add-files", {"data": {"model.py": add_code(offset=1.0).decode()}})
                status = await cluster.wait(
                    "the new code's revision", lambda: model_ready_at(cluster, revision_not=status["configHash"])
                )
                await cluster.patch(
                    "TritonModel", "add", {"spec": {"config": {"dynamicBatching": {"maxQueueDelayMicroseconds": 200}}}}
                )
                await cluster.wait(
                    "the new config's revision", lambda: model_ready_at(cluster, revision_not=status["configHash"])
                )
                await cluster.patch("ConfigMap", "add-files", {"data": {"model.py": FAILING_CODE.decode()}})
                await cluster.wait("LoadFailed", lambda: loaded_condition(cluster, "add", "LoadFailed"))
                # Passes go on after the failure: none of them unloads the model.
                answered = loop.sent
                await cluster.wait("more answers after the failed load", lambda: loop.sent > answered + 20)
            assert loop.failures == [] and loop.sent > 0, loop.failures[:3]
            assert [infer(triton.grpc_url) for triton in tritons] == [[3.0] * 4] * 2
    finally:
        assert pods.stop_all() == []


def _pbtxt(name: str, config: dict[str, object]) -> str:
    """A config.pbtxt of the config a TritonModel holds."""
    return text_format.MessageToString(
        json_format.Parse(json.dumps({"name": name, **config}), model_config_pb2.ModelConfig())
    )


class ReadAfterLoads(ControlClient):
    """A replica whose reads are answered only once the loads sent to it have ended: a busy server, where
    reading every model's config took longer than a quick reload (0.08 s for a changed comment)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.loading = 0
        self.idle = asyncio.Event()

    async def load(self, *args: Any, **kwargs: Any) -> None:
        self.loading += 1
        self.idle.clear()
        try:
            await super().load(*args, **kwargs)
        finally:
            self.loading -= 1
            if not self.loading:
                self.idle.set()

    async def model_states(self, names: Iterable[str], known: Any = None) -> dict[str, ModelState]:
        await asyncio.sleep(0)  # a yield: the reloads the sync just started send their calls
        if self.loading:
            await self.idle.wait()
        return await super().model_states(names, known)


def test_a_reload_that_ends_before_the_read_leaves_the_model_loaded(tmp_path: Path) -> None:
    # The server's repository holds the model's folder: its index lists the model, ready, beside what it serves.
    repository = tmp_path / "repository"
    (repository / "add" / "1").mkdir(parents=True)
    (repository / "add" / "1" / "model.py").write_bytes(add_code())
    (repository / "add" / "config.pbtxt").write_text(_pbtxt("add", ADD_CONFIG))
    spec = TritonServerSpec.model_validate({"exitTimeoutSeconds": 5})

    async def scenario(triton: LocalTriton) -> None:
        async with ReadAfterLoads(triton.grpc_url) as client:
            replica = Replica(client)
            assert (await replica.sync({"add": desired("add", ADD_CONFIG, add_code())})).ok
            edited = desired("add", ADD_CONFIG, add_code(offset=1.0))
            report = await replica.sync({"add": edited})
            report = await replica.sync({"add": edited}) if report.in_flight else report
            assert [(o.action.kind, o.ok) for o in report.outcomes] == [("reload", True)], report.outcomes
            assert report.states["add"].ready and report.states["add"].revision == edited.revision
            assert infer(triton.grpc_url) == [3.0] * 4

    with LocalTriton(spec, tmp_path / "work", Ports(*free_ports(3)), model_repository=repository) as triton:
        asyncio.run(scenario(triton))
    assert triton.shm_regions() == []


def test_a_repository_named_by_a_relative_path_loads_its_python_models(tmp_path: Path) -> None:
    """`--model-repository models/` as docs/own-repository.md writes it, from the folder holding it. A newcomer's run of
    it left every python model loading ("Python model file not found in 'models/add_sub/1/model.py'"
    in Triton's log, with an execution-environment model beside them); local mode now hands Triton
    absolute paths. This run, without such a model, loaded before the change too."""
    write_repository(tmp_path / "models")
    command = local_command([], tmp_path / "work", "--model-repository", "models/", "--once")
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "sample labels: ok" in done.stdout, done.stdout[-3000:]
