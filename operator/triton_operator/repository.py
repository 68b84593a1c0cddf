"""A Triton model repository on disk, read for `triton-operator import`: each model's config.pbtxt and files.

Three shapes are taken: a repository (a folder of model folders), one model folder (holding
config.pbtxt, or a version folder where Triton's auto-complete is to write the config), or one config
file alone. A model folder's files are every file under it but its config.pbtxt, which the
TritonModel holds; Python's `__pycache__` is left out (Python makes it anew).
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


def _is_model_folder(folder: Path) -> bool:
    """A config.pbtxt, or a version folder (1/, 2/...) whose config Triton's auto-complete can write."""
    return (folder / CONFIG).is_file() or any(path.is_dir() and path.name.isdigit() for path in folder.iterdir())


def _config(folder: Path) -> Path | None:
    return folder / CONFIG if (folder / CONFIG).is_file() else None


def _model_folder(folder: Path, config: Path | None, with_files: bool, repository: Repository) -> None:
    """`config` None: the folder has none, for Triton's auto-complete to write."""
    text = None
    if config is not None:
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
    elif _is_model_folder(path):
        _model_folder(path, _config(path), True, repository)
    else:
        repository.whole = True
        for folder in sorted(p for p in path.iterdir() if p.is_dir() and p.name not in SKIPPED_FOLDERS):
            if _is_model_folder(folder):
                _model_folder(folder, _config(folder), True, repository)
            else:
                message = f"neither a {CONFIG} nor a version folder (1/) in it: not a model; move it out of the repository"
                repository.findings.append(Finding("warning", "", message, file=str(folder)))
        if not repository.models:
            message = f"no model folder (a folder with a {CONFIG} or a version folder) in it"
            repository.findings.append(Finding("error", "", message, file=str(path)))
    return repository
