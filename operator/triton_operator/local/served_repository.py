"""The model repository local mode's Triton reads, laid out from the models it serves.

Its own module because Triton reads more of its repository than the loads it is asked for: loading an
ensemble loads its steps again from the repository wherever it holds their folders (docs/triton-facts.md).
So it holds a folder only for each model that loads from the repository (a folder of --model-repository, or
a CR without files), with the config local mode loads it with and links to that folder's other files; a
model sent with its files (a CR's ConfigMap) is not there, so an ensemble never swaps in another copy of it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from ..protocol.desired import DesiredModel
from ..repository import CONFIG
from .local_access import LocalModeError


def _remove(path: Path) -> None:
    """A link (never what it points to), a file, or a folder of ours with what it holds."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _write_if_changed(path: Path, text: str) -> None:
    """Written whole through a rename, and only when it changed: Triton never reads half a config."""
    if path.is_file() and path.read_text() == text:
        return
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.replace(path)


def _lay_out_model(folder: Path, model: DesiredModel, source: Path | None) -> None:
    """`folder` as Triton loads the model: its config, and a link to each other entry of its `source` folder."""
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    folder.mkdir(exist_ok=True)
    _write_if_changed(folder / CONFIG, model.config_pbtxt)
    entries = {}
    if source is not None and source.is_dir():
        entries = {entry.name: entry.absolute() for entry in source.iterdir() if entry.name != CONFIG}
    for path in folder.iterdir():
        if path.name == CONFIG:
            continue
        if path.name not in entries or not path.is_symlink() or os.readlink(path) != str(entries[path.name]):
            _remove(path)
    for name, target in entries.items():
        if not (folder / name).is_symlink():
            (folder / name).symlink_to(target)


def lay_out(root: Path, models: Iterable[DesiredModel], folders: Path | None) -> None:
    """Make `root` hold the models that load from the repository, each from its folder in `folders` (the
    user's repository; None: there is none), and nothing else; refuse `folders` within `root`."""
    if folders is not None and folders.resolve().is_relative_to(root.resolve()):
        raise LocalModeError(
            f"--model-repository {folders} lies in {root}, which local mode lays out anew for its Triton: "
            "keep the models outside the work folder's models/"
        )
    from_repository = {model.name: model for model in models if not model.files}
    root.mkdir(parents=True, exist_ok=True)
    for path in root.iterdir():
        if path.name not in from_repository:
            _remove(path)
    for name, model in from_repository.items():
        _lay_out_model(root / name, model, folders / name if folders is not None else None)
