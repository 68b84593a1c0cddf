"""What `local` may do on a shared machine: it writes only into a work folder it made (a user's files in a
folder named with --workdir survive), and its Triton's control API answers only to a key."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, ROOT
from tests.support.local_mode import local_command
from triton_operator.local.runner import WORKDIR_MARKER, LocalModeError, claimed_workdir


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
