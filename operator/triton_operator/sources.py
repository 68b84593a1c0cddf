"""CR files as the source of truth (the CLI and local mode): YAML files and folders to a Fleet."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .api.resources import is_custom_resource, read_documents
from .api.parse import DEFAULT_NAMESPACE, parse_resources
from .render.fleet import Fleet, plan_fleet


@dataclass
class Sources:
    resources: list[dict[str, Any]] = field(default_factory=list)
    config_maps: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)


def yaml_files(paths: Iterable[str | Path]) -> list[Path]:
    """The files named, and every *.yaml / *.yml under the folders named, in a stable order."""
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml"))
        else:
            files.append(path)
    return files


def read_sources(paths: Iterable[str | Path]) -> Sources:
    """Custom resources, and ConfigMaps (which hold model files); other kinds are ignored."""
    sources = Sources()
    for path in yaml_files(paths):
        for document in read_documents(path.read_text()):
            if is_custom_resource(document):
                sources.resources.append(document)
            elif document.get("apiVersion") == "v1" and document.get("kind") == "ConfigMap":
                metadata = document.get("metadata") or {}
                key = (metadata.get("namespace") or DEFAULT_NAMESPACE, metadata.get("name", ""))
                sources.config_maps[key] = document
    return sources


def load_fleet(paths: Iterable[str | Path]) -> Fleet:
    sources = read_sources(paths)
    servers, models, findings = parse_resources(sources.resources)
    fleet = plan_fleet(servers, models, sources.config_maps)
    fleet.findings[:0] = findings
    fleet.refused |= {finding.obj for finding in findings}
    return fleet
