"""A Triton model repository on disk, read for `triton-operator import`: each model's config.pbtxt and files.

Three shapes are taken: a repository (a folder of model folders), one model folder (holding
config.pbtxt, or a version folder where Triton's auto-complete is to write the config), or one config
file alone. A model folder's files are every file under it but its config.pbtxt, which the
TritonModel holds; Python's `__pycache__` is left out (Python makes it anew). Files are sized before
they are read, and read only where together they fit in a ConfigMap (a python model's model.py is read
all the same: whether it defines auto_complete_config decides what import completes); a link that leads
out of the repository is skipped with a warning (the repository's owner may not own what it points to).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from .api.findings import Finding
from .api.importer import (
    CONFIG_MAP_LIMIT_BYTES,
    ModelFolder,
    completion_needed,
    imported_model,
    imported_server,
    python_model_files,
)
from .api.model import file_path_problem
from .api.object_names import DEFAULT_SERVER
from .protocol.names import FOLDER_FILES_PARAMETER
from .render.config import files_digest
from .sources import ReadElsewhere, Sources, read_text

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


def _outside(path: Path, root: Path, findings: list[Finding]) -> bool:
    """True, with a warning naming it, for a path a link takes out of the repository at `root` (resolved):
    nothing but what was named is read into a model (a 1/labels.txt -> /etc/passwd went into a ConfigMap)."""
    target = path.resolve()
    if target.is_relative_to(root):
        return False
    message = f"a link out of the repository ({root}) to {target}: skipped; copy what the model needs into its folder"
    findings.append(Finding("warning", "", message, file=str(path)))
    return True


def _config(folder: Path, root: Path, findings: list[Finding]) -> Path | None:
    config = folder / CONFIG
    return config if config.is_file() and not _outside(config, root, findings) else None


def _files_under(folder: Path, root: Path, findings: list[Finding]) -> dict[str, Path]:
    """Every file under `folder` but its config, by its path inside it; links within the repository are
    followed (a folder once on each path: a link to a folder above it is no loop), Python's caches left out.
    A path no TritonModel could hold (under a folder named config.pbtxt, too long) is an error naming it."""
    found: dict[str, Path] = {}
    pending = [(folder, frozenset({folder.resolve()}))]
    while pending:
        directory, above = pending.pop()
        for path in directory.iterdir():
            if path.name in SKIPPED_FOLDERS or (path == folder / CONFIG and path.is_file()):
                continue
            if _outside(path, root, findings):
                continue
            if path.is_dir():
                if (target := path.resolve()) not in above:
                    pending.append((path, above | {target}))
            elif path.is_file():
                relative = path.relative_to(folder).as_posix()
                if problem := file_path_problem(relative):  # what no TritonModel could hold
                    findings.append(Finding("error", "", problem, file=str(path)))
                else:
                    found[relative] = path
    return dict(sorted(found.items()))


def _read_files(paths: dict[str, Path]) -> tuple[dict[str, bytes], dict[str, int]]:
    """The files' contents where together they fit in a ConfigMap; else none, only their sizes (the model
    loads from the server's repository): no file is read past what a ConfigMap holds."""
    sizes = {relative: path.stat().st_size for relative, path in paths.items()}
    if sum(sizes.values()) > CONFIG_MAP_LIMIT_BYTES:
        return {}, sizes
    files, room = {}, CONFIG_MAP_LIMIT_BYTES
    for relative, path in paths.items():
        with path.open("rb") as file:
            files[relative] = file.read(room + 1)
        room -= len(files[relative])
        if room < 0:  # a file grew since its size was taken
            return {}, sizes | {relative: len(files[relative])}
    return files, {}


def _model_folder(folder: Path, config: Path | None, with_files: bool, root: Path, repository: Repository) -> None:
    """`config` None: the folder has none, for Triton's auto-complete to write."""
    text = None
    if config is not None:
        text, problem = read_text(config)
        if text is None:
            repository.findings.append(Finding("error", "", problem, file=str(config)))
            return
    model = ModelFolder(folder.resolve().name, text, source=str(folder))
    if with_files:
        paths = _files_under(folder, root, repository.findings)
        files, unread = _read_files(paths)
        model = replace(model, files=files, unread=unread)
        unread_code = {path: paths[path] for path in python_model_files(model) if path in unread}
        model = replace(model, model_code=_read_files(unread_code)[0])
    repository.models.append(model)


def read_repository(path: Path) -> Repository:
    """The models at `path`, with a finding for what cannot be read or holds no model. What a link takes
    out of the folder named (or out of a named file's folder) is skipped with a warning."""
    repository = Repository()
    if path.is_file() or not path.exists():
        # A config.pbtxt is its model folder's; a config file of another name stands alone.
        _model_folder(path.parent, path, path.name == CONFIG, path.parent.resolve(), repository)
    elif _is_model_folder(path):
        root = path.resolve()
        _model_folder(path, _config(path, root, repository.findings), True, root, repository)
    else:
        root = path.resolve()
        repository.whole = True
        for folder in sorted(p for p in path.iterdir() if p.is_dir() and p.name not in SKIPPED_FOLDERS):
            if _outside(folder, root, repository.findings):
                continue
            if _is_model_folder(folder):
                _model_folder(folder, _config(folder, root, repository.findings), True, root, repository)
            else:
                message = (
                    f"neither a {CONFIG} nor a version folder (1/) in it: not a model; move it out of the repository"
                )
                repository.findings.append(Finding("warning", "", message, file=str(folder)))
        if not repository.models:
            message = f"no model folder (a folder with a {CONFIG} or a version folder) in it"
            repository.findings.append(Finding("error", "", message, file=str(path)))
    return repository


def _changes_with(folder: ModelFolder) -> dict[str, bytes]:
    """What changes with each file of the folder: its content where read, else its size and modification time
    (a GiB of weights is not read again at every save)."""
    stamps = {}
    for path in folder.unread:
        with contextlib.suppress(OSError):  # gone since: the watch sees it and reads the folder again
            status = (Path(folder.source) / path).stat()
            stamps[path] = f"{status.st_size}:{status.st_mtime_ns}".encode()
    return {**folder.files, **stamps}


def _declared(document: dict[str, Any]) -> tuple[str, str]:
    """A TritonModel document's object name and Triton model name ("" where it names none readably)."""
    metadata, spec = document.get("metadata"), document.get("spec")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    model_name = spec.get("modelName") if isinstance(spec, dict) else None
    name = name if isinstance(name, str) else ""
    return name, model_name if isinstance(model_name, str) and model_name else name


def repository_as_source(path: Path, crs: Sources, server_name: str | None) -> ReadElsewhere:
    """The models of the repository at `path` as `import` reads them, for local mode to serve from the folders
    themselves: each loads from its folder (no files sent), with a hash of the folder's files in its config
    so an edit of any of them reloads it. A model a CR in `crs` names too is the CR's (what a cluster runs).
    A folder whose config needs Triton's auto-complete is left out with a warning (`import` completes it);
    one whose config.pbtxt is refused is named in `refused`, so the version it last loaded keeps serving."""
    cr_models = [_declared(document) for document in crs.resources if document.get("kind") == "TritonModel"]
    servers = [document for document in crs.resources if document.get("kind") == "TritonServer"]
    server = server_name or (_declared(servers[0])[0] if len(servers) == 1 else DEFAULT_SERVER)
    repository = read_repository(path)
    read = ReadElsewhere(findings=list(repository.findings))
    taken = {name for name, _ in cr_models}
    named_by_crs = {model_name for _, model_name in cr_models}
    models = []
    for folder in repository.models:
        if why := completion_needed(folder):
            if folder.folder not in named_by_crs:  # a CR's config serves it: nothing to complete here
                message = (
                    f"{why}: Triton's auto-complete must write its config; run `triton-operator "
                    "import` on it, or write its inputs and outputs into config.pbtxt"
                )
                read.findings.append(Finding("warning", "", message, file=folder.source))
            continue
        try:
            model = imported_model(replace(folder, files={}, unread={}), server, taken)
        except text_format.ParseError as error:
            read.findings.append(Finding("error", "", f"not a Triton config.pbtxt: {error}", file=folder.source))
            read.refused.add(folder.source)
            continue
        [document] = model.documents
        if (document["spec"].get("modelName") or document["metadata"]["name"]) in named_by_crs:
            continue
        parameters = document["spec"]["config"].setdefault("parameters", {})
        parameters[FOLDER_FILES_PARAMETER] = {"stringValue": files_digest(_changes_with(folder))}
        taken.add(model.name)
        models.append(model)
        read.documents.append((folder.source, document))
    if not servers and models:
        read.documents.insert(0, (str(path), imported_server(server, models)))
    return read
