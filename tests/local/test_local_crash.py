"""A model that kills tritonserver while it loads: local mode names it with Triton's own log lines, serves
the others again from a restarted Triton, and tries it again once its files change."""

from __future__ import annotations

import copy
import json
import os
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.local_mode import SHM, local_command, processes_using, start_local
from tests.support.models import add_code
from tests.support.resources import FILES, MODEL, SERVER
from triton_operator.api.server import TritonServerSpec
from triton_operator.local.crash_log import crash_in_log
from triton_operator.local.tritonserver import LocalTriton

# A load that kills its Triton as the python stub's parent, the way a backend crashing in Triton's process would.
KILLS_TRITON = "import os, signal; os.kill(os.getppid(), signal.SIGSEGV)"

LOG_OF_A_SIGSEGV = """\
I1128 20:25:20.459009 25676 model_lifecycle.cc:472] "loading: add:1"
I1128 20:25:20.459009 25676 model_lifecycle.cc:472] "loading: crash:1"
I1128 20:25:20.486359 25676 python_be.cc:2249] "TRITONBACKEND_ModelInstanceInitialize: crash_0 (CPU device 0)"
I1128 20:25:20.486359 25676 model_lifecycle.cc:839] "successfully loaded 'add'"
I1128 20:25:20.486359 25676 python_be.cc:2249] "a line of crashed_model, another model"
Signal (11) received.
I1128 20:25:22.115719 25676 model_lifecycle.cc:839] "successfully loaded 'crash'"
 0# 0x00005634AE10952D in tritonserver
"""


@pytest.mark.parametrize(
    ("log", "loading", "lines", "signalled"),
    [
        (  # the load ended after the fatal signal, while Triton printed its stack trace: it was under way
            LOG_OF_A_SIGSEGV,
            ["crash"],
            [*LOG_OF_A_SIGSEGV.splitlines()[1:3], *LOG_OF_A_SIGSEGV.splitlines()[5:]],
            True,
        ),
        (  # SIGKILL: no line of Triton's own, the loads it had not ended are the ones under way
            '"loading: a:1"\n"loading: b:1"\n"failed to load \'a\' version 1: boom"\n',
            ["b"],
            ['"loading: b:1"'],
            False,
        ),
        (  # a clean exit's signal is no crash: the log's end decides
            '"loading: a:1"\n"successfully loaded \'a\'"\nSignal (15) received.\n',
            [],
            [],
            False,
        ),
    ],
)
def test_the_loads_under_way_when_triton_died_are_read_from_its_log(
    log: str, loading: list[str], lines: list[str], signalled: bool
) -> None:
    crash = crash_in_log(log)
    assert (crash.loading, crash.lines, crash.signalled) == (loading, lines, signalled)


def test_the_log_tail_is_whole_lines(tmp_path: Path) -> None:
    """A tail cut by characters starts at a line's start, never inside a stack trace's line."""
    triton = LocalTriton(TritonServerSpec(), tmp_path)
    triton.log_path.write_text(LOG_OF_A_SIGSEGV)
    lines = LOG_OF_A_SIGSEGV.splitlines(keepends=True)
    assert triton.log_tail(len(lines[-1]) + 10) == lines[-1]
    assert triton.log_tail(len(lines[-2]) + len(lines[-1])) == lines[-2] + lines[-1]
    assert triton.log_tail(100_000) == LOG_OF_A_SIGSEGV


def _infer(http_port: str, model: str) -> list[float]:
    inputs = [{"name": name, "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]} for name in ("A", "B")]
    request = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/v2/models/{model}/infer", data=json.dumps({"inputs": inputs}).encode()
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: list[float] = json.loads(response.read())["outputs"][0]["data"]
        return answer


def _crash_model(code: bytes) -> list[dict[str, Any]]:
    files = copy.deepcopy(FILES) | {"metadata": {"name": "crash-files"}, "data": {"model.py": code.decode()}}
    model = copy.deepcopy(MODEL)
    model["metadata"]["name"] = "crash"
    model["spec"]["files"]["configMapRef"]["name"] = "crash-files"
    return [files, model]


@pytest.mark.triton
def test_a_model_killing_triton_is_named_held_back_and_the_others_serve_again(tmp_path: Path) -> None:
    crs, workdir, log = tmp_path / "crs", tmp_path / "work", tmp_path / "out.log"
    crs.mkdir()
    (crs / "server.yaml").write_text(yaml.safe_dump_all([SERVER, FILES, MODEL]))
    command = local_command([crs], workdir)
    http_port = command[command.index("--http-port") + 1]
    process, output = start_local(command, log)
    try:
        # add serves first: a death while two models load names both (either could have caused it).
        output.wait_for("watching the files", timeout=180)
        (crs / "crash.yaml").write_text(yaml.safe_dump_all(_crash_model(add_code(initialize=KILLS_TRITON))))
        # SIGSEGV, or SIGKILL from local mode where Triton's handler of it hangs (seen on a busy machine).
        signals = ("11 (SIGSEGV)", "9 (SIGKILL)")
        died = tuple(f"tritonserver died (signal {n}) while loading crash; its log" for n in signals)
        at = output.wait_for_first(died, timeout=180)
        at = output.wait_for("restarting tritonserver without crash: loaded again once its files or CR change", at)
        told = log.read_text()[:at].rsplit("its log (", 1)[1].splitlines()[1:-1]
        assert told and all(line.startswith(("I", "W", "E", "Signal (", " ")) for line in told), told
        assert "Signal (11) received." in told and any('"loading: crash:1"' in line for line in told), told
        at = output.wait_for("watching the files", at, timeout=180)
        table = log.read_text()[:at].rsplit("MODEL ", 1)[1]
        assert any(line.startswith("crash ") and " CRASHED " in line for line in table.splitlines()), table
        assert _infer(http_port, "add") == [2, 4, 6, 8]

        (crs / "crash.yaml").write_text(yaml.safe_dump_all(_crash_model(add_code(offset=1.0))))
        at = output.wait_for("load crash: done", at, timeout=120)
        assert _infer(http_port, "crash") == [3, 5, 7, 9]
        assert _infer(http_port, "add") == [2, 4, 6, 8]
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    assert process.returncode == 0, log.read_text()[-3000:]
    assert processes_using(workdir) == []
    assert [name for name in os.listdir(SHM) if name.startswith(f"triton_operator_{process.pid}_")] == []
