"""A Triton model repository on disk, read for `triton-operator import`: each model's config.pbtxt and files.

Three shapes are taken: a repository (a folder of model folders), one model folder (holding
config.pbtxt), or one config file alone. A model folder's files are every file under it but its
config.pbtxt, which the TritonModel holds; Python's `__pycache__` is left out (Python makes it anew).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .api.importer import ModelFolder
from .api.validation import Finding
from .sources import read_text

CONFIG = "config.pbtxt"
SKIPPED_FOLDERS = {"__pycache__"}


@dataclass
class Repository:
    models: list[ModelFolder] = field(default_factory=list)
    whole: bool = False  # a repository, not one model: its TritonServer is imported too
    findings: list[Finding] = field(default_factory=list)


def _model_folder(folder: Path, config: Path, with_files: bool, repository: Repository) -> None:
    text, problem = read_text(config)
    if text is None:
        repository.findings.append(Finding("error", "", problem, file=str(config)))
        return
    files = {}
    if with_files:
        for path in sorted(folder.rglob("*")):
            relative = path.relative_to(folder)
            if path.is_file() and path != config and not SKIPPED_FOLDERS & set(relative.parts):
                files[relative.as_posix()] = path.read_bytes()
    repository.models.append(ModelFolder(folder.resolve().name, text, files, str(folder)))


def read_repository(path: Path) -> Repository:
    """The models at `path`, with a finding for what cannot be read or holds no model."""
    repository = Repository()
    if path.is_file() or not path.exists():
        # A config.pbtxt is its model folder's; a config file of another name stands alone.
        _model_folder(path.parent, path, path.name == CONFIG, repository)
    elif (path / CONFIG).is_file():
        _model_folder(path, path / CONFIG, True, repository)
    else:
        repository.whole = True
        for folder in sorted(p for p in path.iterdir() if p.is_dir() and p.name not in SKIPPED_FOLDERS):
            if (folder / CONFIG).is_file():
                _model_folder(folder, folder / CONFIG, True, repository)
            else:
                message = f"no {CONFIG} in it: the operator loads every model with its config; write one (or move the folder out)"
                repository.findings.append(Finding("warning", "", message, file=str(folder)))
        if not repository.models:
            repository.findings.append(Finding("error", "", f"no model folder (a folder with a {CONFIG}) in it", file=str(path)))
    return repository
