"""Dockerfiles read by instruction, as Docker's parser reads them (continuations joined, comment lines
dropped): the operator's own, which the image and chart tests hold to what they expect, and those
`triton-operator image` writes, held to what Triton's compose.py writes and to what their inputs may add."""

from __future__ import annotations

from tests.conftest import ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def logical_lines(text: str) -> list[str]:
    """Instructions with their continuations joined, comments and blank lines left out."""
    lines, current = [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        current += " " + line.strip().removesuffix("\\")
        if not line.rstrip().endswith("\\"):
            lines.append(current.strip())
            current = ""
    return lines + ([current.strip()] if current.strip() else [])


def instructions_in(text: str, name: str) -> list[str]:
    """The arguments of every `name` instruction (FROM, RUN, COPY...) of a Dockerfile, in order."""
    return [line.split(None, 1)[1] for line in logical_lines(text) if line.split(None, 1)[0] == name]


def instructions(name: str) -> list[str]:
    """The arguments of every `name` instruction of the operator's own Dockerfile, in order."""
    return instructions_in(DOCKERFILE, name)
