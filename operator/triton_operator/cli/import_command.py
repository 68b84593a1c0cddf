"""`triton-operator import`: TritonModels (and their ConfigMaps) from a Triton model repository, with
configs that need it completed by Triton's auto-complete on a local tritonserver.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..api.findings import Finding, errors
from ..yaml_io import dump_yaml
from .file_writes import replace_file

if TYPE_CHECKING:
    from ..api.importer import ImportedModel, ModelFolder


def _completed(folders: list[ModelFolder], no_complete: bool, findings: list[Finding]) -> list[ModelFolder]:
    """The folders, with the configs that need it completed by Triton's auto-complete (one local tritonserver
    for all), each said on stderr. What cannot be completed becomes a finding and is left out."""
    from google.protobuf import text_format

    from ..api.importer import completed_config, completion_needed, completion_summary

    needed = {folder.source: reason for folder in folders if (reason := completion_needed(folder))}
    if no_complete:
        for folder in folders:
            if folder.config is None:
                message = (
                    "no config.pbtxt, and --no-complete leaves it so: skipped; write one, or import it where "
                    "tritonserver runs"
                )
                findings.append(Finding("warning", "", message, file=folder.source))
        return [folder for folder in folders if folder.config is not None]
    if not needed:
        return folders
    from ..local.auto_complete import complete_configs
    from ..local.tritonserver import TritonFailed, TritonNotInstalled

    incomplete = [folder for folder in folders if folder.source in needed]
    try:
        completions = complete_configs(incomplete)
    except (TritonNotInstalled, TritonFailed) as error:
        message = (
            f"{', '.join(folder.folder for folder in incomplete)}: their configs need Triton's auto-complete, which "
            f"needs a local tritonserver: {error}. Or import with --no-complete and write their inputs and outputs "
            "yourself"
        )
        findings.append(Finding("error", "", message))
        return [folder for folder in folders if folder.source not in needed]
    done = {}
    for folder, completion in zip(incomplete, completions, strict=True):
        if completion.config is None:
            message = (
                f"Triton's auto-complete could not complete its config ({needed[folder.source]}): {completion.error}\n"
                "Fix model.py's auto_complete_config, or write the whole config.pbtxt and import with --no-complete"
            )
            findings.append(Finding("error", "", message, file=folder.source))
            continue
        config = completed_config(folder.config, completion.config)
        done[folder.source] = replace(folder, config=text_format.MessageToString(config))
        summary = f"completed by Triton's auto-complete: {completion_summary(config)} ({needed[folder.source]})"
        print(f"{folder.source}: {summary}", file=sys.stderr)
        if still := completion_needed(done[folder.source]):
            message = (
                f"still {still.removeprefix('a python model whose config.pbtxt has ')} after auto-complete: its "
                "model.py sets none in auto_complete_config; write them into the TritonModel's spec.config"
            )
            findings.append(Finding("warning", "", message, file=folder.source))
    return [
        done.get(folder.source, folder) for folder in folders if folder.source in done or folder.source not in needed
    ]


def cmd_import(args: argparse.Namespace) -> int:
    from google.protobuf import text_format

    from ..api.importer import imported_model, imported_server
    from ..repository import read_repository

    repository = read_repository(Path(args.path))
    findings = list(repository.findings)
    models: list[ImportedModel] = []
    for folder in _completed(repository.models, args.no_complete, findings):
        try:
            models.append(imported_model(folder, args.server, {model.name for model in models}))
        except text_format.ParseError as error:
            findings.append(Finding("error", "", f"not a Triton config.pbtxt: {error}", file=folder.source))
    for finding in findings:
        print(finding, file=sys.stderr)
    if errors(findings):
        return 1
    files = {model.name: model.documents for model in models}
    if repository.whole:
        files = {args.server: [imported_server(args.server, models)]} | files
    for model in models:
        if model.note:
            print(f"note: {model.note}", file=sys.stderr)
    if args.out is None:
        sys.stdout.write("---\n".join(dump_yaml(document) for documents in files.values() for document in documents))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, documents in files.items():
        replace_file(args.out / f"{name}.yaml", "---\n".join(dump_yaml(document) for document in documents).encode())
    print(f"wrote {len(files)} files to {args.out}: {', '.join(f'{name}.yaml' for name in files)}")
    return 0
