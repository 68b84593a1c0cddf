"""What `local` may do on a shared machine: it writes only into a work folder it made (a user's files in a
folder named with --workdir survive), and its Triton's control API answers only to a key."""

from __future__ import annotations

import signal
import stat
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.conftest import EXAMPLES, ROOT
from tests.support.local_mode import Output, local_command
from triton_operator.local.local_access import WORKDIR_MARKER, LocalModeError, claimed_workdir
from triton_operator.protocol.names import CONTROL_HEADER, GRPC_CONTROL_METADATA


def test_a_folder_of_a_users_files_is_refused_as_workdir_and_left_as_it_was(tmp_path: Path) -> None:
    workdir = tmp_path / "mine"
    (workdir / "backends").mkdir(parents=True)
    (workdir / "backends" / "notes.txt").write_text("mine\n")
    done = subprocess.run(
        local_command([EXAMPLES], workdir, "--once"), cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"triton-operator local: --workdir {workdir} holds files local mode did not make (it has no "
        f"{WORKDIR_MARKER}): name a new or empty folder, which local mode makes its own"
    )
    assert (workdir / "backends" / "notes.txt").read_text() == "mine\n"
    assert sorted(path.relative_to(workdir).as_posix() for path in workdir.rglob("*")) == [
        "backends",
        "backends/notes.txt",
    ]


def test_a_new_or_empty_folder_becomes_locals_own_and_stays_so(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for workdir in (tmp_path / "new" / "work", tmp_path / "empty"):
        assert claimed_workdir(workdir) == workdir and (workdir / WORKDIR_MARKER).is_file()
        (workdir / "backends").mkdir()
        assert claimed_workdir(workdir) == workdir, "a folder local made is its own on the next run"
    (tmp_path / "file").write_text("")
    with pytest.raises(LocalModeError, match="is not a folder"):
        claimed_workdir(tmp_path / "file")


def _status(url: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=b"{}", headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.triton
def test_the_control_api_answers_only_to_the_key_local_saved_and_inference_stays_open(tmp_path: Path) -> None:
    """Without --control-key a local user of a shared machine loaded a model (running its code as the
    developer): local makes a key, prints it once, saves it 0600 in its workdir, and syncs with it."""
    workdir, log = tmp_path / "work", tmp_path / "local.log"
    command = local_command([EXAMPLES], workdir)
    http, grpc = (command[command.index(flag) + 1] for flag in ("--http-port", "--grpc-port"))
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=ROOT, start_new_session=True, stdout=out, stderr=subprocess.STDOUT)
    try:
        Output(log).wait_for("watching the files", timeout=300)
        key_file = workdir / "control-key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        key = key_file.read_text().strip()
        assert len(key) >= 32 and log.read_text().count(key) == 1, "printed once, at start"

        repository = f"http://127.0.0.1:{http}/v2/repository"
        assert _status(f"{repository}/models/any/load", {}) == 403
        assert _status(f"{repository}/index", {CONTROL_HEADER: "wrong"}) == 403
        assert _status(f"{repository}/index", {CONTROL_HEADER: key}) == 200
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
        try:
            with pytest.raises(InferenceServerException, match="This protocol is restricted"):
                client.load_model("any")
            with pytest.raises(InferenceServerException, match="This protocol is restricted"):
                client.unload_model("add_sub")
            inputs = [grpcclient.InferInput(name, [1, 4], "FP32") for name in ("INPUT0", "INPUT1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(np.array([[1, 2, 3, 4]], np.float32))
            assert client.infer("add_sub", inputs).as_numpy("OUTPUT0").tolist() == [[2, 4, 6, 8]]
            assert client.get_model_config("add_sub").config.backend == "python"  # metadata stays open
            assert client.get_inference_statistics("add_sub").model_stats  # and statistics
            client.unload_model("add_sub", headers={GRPC_CONTROL_METADATA: key})
            assert not client.is_model_ready("add_sub")
        finally:
            client.close()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()[-3000:]


@pytest.mark.triton
def test_open_control_api_opens_it_with_a_warning(tmp_path: Path) -> None:
    workdir, log = tmp_path / "work", tmp_path / "local.log"
    command = local_command([EXAMPLES], workdir, "--open-control-api")
    http = command[command.index("--http-port") + 1]
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=ROOT, start_new_session=True, stdout=out, stderr=subprocess.STDOUT)
    try:
        Output(log).wait_for("watching the files", timeout=300)
        assert _status(f"http://127.0.0.1:{http}/v2/repository/index", {}) == 200
        assert "warning: --open-control-api: every user of this machine can load models" in log.read_text()
        assert not (workdir / "control-key").exists()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()[-3000:]
