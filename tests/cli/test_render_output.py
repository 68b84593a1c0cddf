"""How `render` writes its output folder: whole or not at all (written beside it, then moved into place), a
user's other files in it left alone, a file holding a key its owner's alone; and how render, import and image
replace a link where they write, never writing through it."""

from __future__ import annotations

import os
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path

from tests.conftest import EXAMPLES, ROOT
from tests.support.cli import run
from tests.support.repository import write_repository

MODELS = ["add_sub", "python_batched_service", "shm_scale", "warm_identity"]


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder`, with a file's bytes (None for a folder)."""
    return {
        path.relative_to(folder).as_posix(): None if path.is_dir() else path.read_bytes()
        for path in sorted(folder.rglob("*"))
    }


def _limited_to_4_kib() -> None:
    """A process that may write no file past 4 KiB: the write past it fails (EFBIG), as on a full disk."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def test_a_render_that_fails_half_way_leaves_no_output(tmp_path: Path) -> None:
    """The models' files are under 4 KiB, manifests.yaml (written last) over it: the render fails there."""
    done = subprocess.run(
        [sys.executable, "-m", "triton_operator.cli", "render", str(EXAMPLES), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "operator"), "PYTHONDONTWRITEBYTECODE": "1"},
        preexec_fn=_limited_to_4_kib,
        timeout=120,
    )
    assert done.returncode == 2 and "File too large" in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == [], "neither the output nor what was written of it"


def test_an_output_folder_that_cannot_take_the_render_is_left_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifests.yaml").write_text("an earlier render\n")
    (out / "shm_scale").write_text("a file where render writes a folder\n")
    before = _tree(out)
    code, _, err = run("render", str(EXAMPLES), "--out", str(out))
    assert code == 2
    assert f"triton-operator render: {out / 'shm_scale'} is a file, where render writes a folder" in err, err
    assert _tree(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_render_into_a_folder_of_other_files_adds_its_own_and_leaves_theirs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "add_sub" / "1").mkdir(parents=True)
    (out / "notes.txt").write_text("mine\n")
    (out / "add_sub" / "1" / "model.py").write_text("an earlier model.py, much longer than the new one\n" * 100)
    assert run("render", str(EXAMPLES), "--out", str(out))[0] == 0
    fresh = tmp_path / "fresh"
    assert run("render", str(EXAMPLES), "--out", str(fresh))[0] == 0
    assert _tree(out) == {**_tree(fresh), "notes.txt": b"mine\n"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "out"], "nothing left beside them"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_manifests_holding_a_key_are_their_owners_alone(tmp_path: Path) -> None:
    """The key Secrets hold the keys given: manifests.yaml is 0600 then, fresh or written again."""
    keyed, plain = tmp_path / "keyed", tmp_path / "plain"
    assert run("render", str(EXAMPLES), "--out", str(plain))[0] == 0
    assert run("render", str(EXAMPLES), "--out", str(keyed), "--control-key", "secret")[0] == 0
    assert _mode(keyed / "manifests.yaml") == 0o600
    assert _mode(plain / "manifests.yaml") & 0o044, "nothing secret: as the umask says"
    assert run("render", str(EXAMPLES), "--out", str(plain), "--shm-key", "secret")[0] == 0
    assert _mode(plain / "manifests.yaml") == 0o600


def test_a_link_in_the_output_folder_is_replaced_never_written_through(tmp_path: Path) -> None:
    """An attacker's out/manifests.yaml -> ~/.bashrc, or a model folder linked elsewhere: the files they point
    to stay as they were."""
    bashrc, elsewhere = tmp_path / "bashrc", tmp_path / "elsewhere"
    bashrc.write_text("the user's own\n")
    (elsewhere / "1").mkdir(parents=True)
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifests.yaml").symlink_to(bashrc)
    (out / "add_sub").symlink_to(elsewhere)
    assert run("render", str(EXAMPLES), "--out", str(out), "--control-key", "secret")[0] == 0
    assert bashrc.read_text() == "the user's own\n" and _tree(elsewhere) == {"1": None}
    assert not (out / "manifests.yaml").is_symlink() and _mode(out / "manifests.yaml") == 0o600
    assert not (out / "add_sub").is_symlink() and (out / "add_sub" / "config.pbtxt").is_file()


def test_import_and_image_replace_links_where_they_write(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("the user's own\n")
    crs, images = tmp_path / "crs", tmp_path / "images"
    crs.mkdir()
    images.mkdir()
    (crs / "add-sub.yaml").symlink_to(victim)
    (crs / ".labels.yaml.partial").symlink_to(victim)  # where import writes a file before renaming it
    (images / "triton.Dockerfile").symlink_to(victim)
    repository = write_repository(tmp_path / "models")
    assert run("import", str(repository), "--out", str(crs), "--no-complete")[0] == 0
    assert run("image", str(EXAMPLES), "--out", str(images))[0] == 0
    assert victim.read_text() == "the user's own\n"
    assert not (crs / "add-sub.yaml").is_symlink() and not (images / "triton.Dockerfile").is_symlink()
    assert not (crs / ".labels.yaml.partial").exists()
