"""CR files as the source of truth (the CLI and local mode): YAML files and folders to a Fleet.

Files are data: whatever they hold (a YAML error, bytes that are not text, a list where an object
belongs, a kind of ours misspelt) becomes a finding naming the file, never an exception.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .api.findings import Finding
from .api.parse import DEFAULT_NAMESPACE, object_id, parse_resources
from .api.resources import KINDS
from .api.types import API_VERSION, GROUP
from .render.fleet import Fleet, plan_fleet
from .yaml_io import Document, yaml_documents


@dataclass
class Sources:
    resources: list[dict[str, Any]] = field(default_factory=list)
    config_maps: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)  # object id -> the file it came from
    lines: dict[str, dict[str, int]] = field(default_factory=dict)  # object id -> the line of each field path in it
    findings: list[Finding] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # "FILE: apiVersion Kind/namespace/name"
    # Files holding an error (unreadable, not YAML, a document that is no object, a kind of ours
    # misspelt, an object refused): local mode keeps serving what they held before, as an object
    # mid-edit may not even be named right (metadata a string, a new name and a broken spec).
    refused_files: set[str] = field(default_factory=set)
    kinds: dict[str, int] = field(default_factory=dict)  # TritonModel/TritonServer -> documents seen
    # Files holding nothing: a writer or editor that empties a file before writing it shows it so for a moment,
    # and local mode keeps what it held (deleting the file is how its objects go).
    empty_files: set[str] = field(default_factory=set)


@dataclass
class Loaded:
    """A fleet planned from files, with where each object came from."""

    fleet: Fleet
    sources: Sources

    def summary(self) -> str:
        """e.g. "4 models, 1 server: 2 errors, 1 warning"."""
        counts = [
            _count(self.sources.kinds.get("TritonModel", 0), "model"),
            _count(self.sources.kinds.get("TritonServer", 0), "server"),
        ]
        if self.sources.ignored:
            counts.append(f"{len(self.sources.ignored)} ignored")
        errors = len(self.fleet.errors)
        return f"{', '.join(counts)}: {_count(errors, 'error')}, {_count(len(self.fleet.findings) - errors, 'warning')}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


YAML_SUFFIXES = (".yaml", ".yml")


def yaml_files(paths: Iterable[str | Path]) -> list[Path]:
    """The files named, and every *.yaml / *.yml under the folders named, in a stable order."""
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.suffix in YAML_SUFFIXES and p.is_file())
        else:
            files.append(path)
    return files


def read_text(path: Path) -> tuple[str | None, str]:
    """The file's text, or None and why it cannot be read (in words, not a traceback)."""
    try:
        return path.read_bytes().decode("utf-8"), ""
    except FileNotFoundError:
        return None, "no such file or folder"
    except IsADirectoryError:
        return None, "is a folder, not a file"
    except UnicodeDecodeError as error:
        return (
            None,
            f"not UTF-8 text (byte {error.start} is {error.object[error.start : error.start + 1]!r}): is it a YAML "
            "file?",
        )
    except OSError as error:
        return None, f"cannot be read: {error.strerror or error}"


def _line_of(path: str, lines: dict[str, int]) -> int | None:
    """The line of a field path (spec.config.input[0].dims, or pydantic's items.0.key), or of the
    nearest field above it that the document has (a missing field: the map it is missing from)."""
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    while path:
        if path in lines:
            return lines[path]
        path = path.rpartition(".")[0]
    return None


def _ours(api_version: str) -> bool:
    return api_version.split("/", 1)[0] == GROUP


def _unknown_kind_or_version(document: dict[str, Any], file: str) -> list[Finding]:
    """A document in our group that is not one of our kinds and versions: an error, never skipped silently."""
    api_version, kind = document["apiVersion"], document.get("kind")
    kind = kind if isinstance(kind, str) else ""
    obj = object_id(kind or "(no kind)", document.get("metadata"))
    findings = []
    if api_version != API_VERSION:
        findings.append(
            Finding(
                "error", "apiVersion", f"unknown version '{api_version}'; this operator serves {API_VERSION}", obj, file
            )
        )
    if kind not in KINDS:
        hint = difflib.get_close_matches(kind, list(KINDS), n=1)
        advice = f"did you mean '{hint[0]}'?" if hint else f"use one of {', '.join(KINDS)}"
        findings.append(Finding("error", "kind", f"unknown kind '{kind}' in {GROUP}; {advice}", obj, file))
    return findings


def _config_map(document: dict[str, Any], file: str) -> tuple[dict[str, Any], list[Finding]]:
    """A ConfigMap with only its well-formed keys: `data` text, `binaryData` base64."""
    obj = object_id("ConfigMap", document.get("metadata"))
    findings = []
    kept: dict[str, dict[str, str]] = {"data": {}, "binaryData": {}}
    for section in kept:
        values = document.get(section) or {}
        if not isinstance(values, dict):
            findings.append(
                Finding("error", section, f"expected a map of key: value, got {type(values).__name__}", obj, file)
            )
            continue
        for key, value in values.items():
            if not isinstance(value, str):
                findings.append(
                    Finding("error", f"{section}.{key}", f"expected a string, got {type(value).__name__}", obj, file)
                )
                continue
            if section == "binaryData":
                try:
                    base64.b64decode(value, validate=True)
                except binascii.Error as error:
                    findings.append(Finding("error", f"{section}.{key}", f"not base64: {error}", obj, file))
                    continue
            kept[section][str(key)] = value
    return {**document, **kept}, findings


def _read_file(path: Path, sources: Sources) -> None:
    file = str(path)
    text, problem = read_text(path)
    if text is None:
        sources.refused_files.add(file)
        sources.findings.append(Finding("error", "", problem, file=file))
        return
    read = yaml_documents(text, file)
    if isinstance(read, Finding):
        sources.refused_files.add(file)
        sources.findings.append(read)
        return
    documents = [document for document in read if document.content is not None]
    if not documents:
        sources.empty_files.add(file)
        sources.findings.append(
            Finding(
                "warning",
                "",
                "empty: no YAML documents in it (local mode keeps serving what it held; delete the file to remove it)",
                file=file,
            )
        )
    for number, document in enumerate(documents, start=1):
        if document.repeated:  # refused whole, as kubectl refuses it
            sources.refused_files.add(file)
            content = document.content
            kind = content.get("kind") if isinstance(content, dict) else None
            obj = object_id(kind, content.get("metadata")) if isinstance(kind, str) else ""
            sources.findings += [
                dataclasses.replace(finding, obj=obj, file=f"{file}:{line}") for line, finding in document.repeated
            ]
            continue
        _classify(document, number, file, sources)


def _classify(read: Document, number: int, file: str, sources: Sources) -> None:
    document = read.content
    if not isinstance(document, dict):
        message = f"is a {type(document).__name__}, not a Kubernetes object (a map with apiVersion, kind and metadata)"
        sources.findings.append(Finding("error", f"document {number}", message, file=file))
        sources.refused_files.add(file)
        return
    api_version, kind = document.get("apiVersion"), document.get("kind")
    kind = kind if isinstance(kind, str) else None
    if isinstance(api_version, str) and _ours(api_version):
        if kind in KINDS:
            sources.kinds[kind] = sources.kinds.get(kind, 0) + 1
        problems = _unknown_kind_or_version(document, file)
        if problems:
            sources.findings += problems
            sources.refused_files.add(file)
            return
        assert kind is not None  # _unknown_kind_or_version refuses a document without one of KINDS
        obj = object_id(kind, document.get("metadata"))
        if obj in sources.origins:
            sources.findings.append(
                Finding("error", "metadata.name", f"also defined in {sources.origins[obj]}; keep one", obj, file)
            )
            return
        sources.origins[obj] = file
        sources.lines[obj] = read.lines
        sources.resources.append(document)
    elif api_version == "v1" and kind == "ConfigMap":
        config_map, problems = _config_map(document, file)
        sources.findings += problems
        found = document.get("metadata")
        metadata = found if isinstance(found, dict) else {}
        sources.config_maps[(str(metadata.get("namespace") or DEFAULT_NAMESPACE), str(metadata.get("name", "")))] = (
            config_map
        )
    else:
        found = document.get("metadata")
        named = isinstance(found, dict) and found.get("name")  # a Kustomization, say, has none
        what = object_id(str(kind), found) if named else str(kind or "(no kind)")
        sources.ignored.append(f"{file}: {api_version or '(no apiVersion)'} {what}")


@dataclass
class ReadElsewhere:
    """Objects read from something other than YAML files (a model repository's folders), each with where it
    came from; `refused` names the places holding an error now, whose objects local mode keeps as they ran."""

    documents: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    refused: set[str] = field(default_factory=set)


def read_sources(paths: Iterable[str | Path]) -> Sources:
    """Custom resources of ours, and ConfigMaps (which hold model files); other kinds are listed as ignored."""
    paths = list(paths)
    sources = Sources()
    for path in yaml_files(paths):
        _read_file(path, sources)
    if not sources.kinds and not sources.refused_files:
        where = ", ".join(map(str, paths))
        sources.findings.append(
            Finding("error", "", f"no TritonServer or TritonModel found in {where}: nothing to check")
        )
    return sources


def add_read_elsewhere(sources: Sources, elsewhere: ReadElsewhere) -> None:
    """Take in objects read from elsewhere as if read from files named after where they came from."""
    for number, (origin, document) in enumerate(elsewhere.documents, start=1):
        _classify(Document(document, {}, []), number, origin, sources)
    sources.findings += elsewhere.findings
    sources.refused_files |= elsewhere.refused


def load(paths: Iterable[str | Path]) -> Loaded:
    """Read, parse and plan; every finding names the file of its object."""
    return planned(read_sources(paths))


def planned(sources: Sources) -> Loaded:
    """Parse and plan what was read; every finding names the file (or folder) of its object."""
    servers, models, findings = parse_resources(sources.resources)
    fleet = plan_fleet(servers, models, sources.config_maps, earlier=sources.findings + findings)
    fleet.findings = [with_file(finding, sources.origins) for finding in fleet.findings]
    sources.refused_files |= {finding.file for finding in fleet.errors if finding.obj and finding.file}
    fleet.findings = [_with_line(finding, sources) for finding in fleet.findings]
    return Loaded(fleet, sources)


def _with_line(finding: Finding, sources: Sources) -> Finding:
    """The finding's file with the line of its field, where the object was read from YAML."""
    lines = sources.lines.get(finding.obj)
    if not lines or not finding.path or finding.file != sources.origins.get(finding.obj):
        return finding
    line = _line_of(finding.path, lines)
    return dataclasses.replace(finding, file=f"{finding.file}:{line}") if line else finding


def with_file(finding: Finding, origins: dict[str, str], obj: str | None = None) -> Finding:
    """The finding with the file of its object (or of `obj`, the object it was rendered from)."""
    file = origins.get(obj or finding.obj)
    return dataclasses.replace(finding, file=file) if file and not finding.file else finding
