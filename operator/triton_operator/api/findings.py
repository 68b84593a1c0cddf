"""A finding: one problem with an object, where in it, what is wrong and what to do.

Every check (Triton's rules on a config, the Kubernetes schema, files that are no YAML) reports in
findings, so the CLI, local mode and the operator's statuses print them alike and all in one run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Finding:
    """One problem: in which object, where in it (a field path), what is wrong and what to do."""

    severity: Literal["error", "warning"]
    path: str
    message: str
    obj: str = ""  # Kind/namespace/name, once known
    file: str = ""  # the file it came from (with :line where YAML gives one), when read from files

    @property
    def where(self) -> str:
        return ": ".join(part for part in (self.obj, self.path) if part)

    def __str__(self) -> str:
        return ": ".join(part for part in (self.severity, self.file, self.where, self.message) if part)


class Findings(list[Finding]):
    """The findings of one check, added by severity."""

    def error(self, path: str, message: str) -> None:
        self.append(Finding("error", path, message))

    def warning(self, path: str, message: str) -> None:
        self.append(Finding("warning", path, message))


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [finding for finding in findings if finding.severity == "error"]
