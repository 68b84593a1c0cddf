"""The operator's Dockerfile, read by instruction: the image tests and the chart tests hold it to
what they expect."""

from __future__ import annotations

from tests.conftest import ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instructions(name: str) -> list[str]:
    """The arguments of every `name` instruction (FROM, RUN, USER...), in order."""
    return [line.split(None, 1)[1] for line in DOCKERFILE.splitlines() if line.startswith(f"{name} ")]
