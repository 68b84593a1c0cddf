"""Comments and docstrings in operator/ say why in words; what was measured lives in bench/RESULTS.md (and
Triton's behaviour in docs/triton-facts.md), where a figure has its run, date and machine beside it and is
kept up to date. A figure copied into a comment goes stale unseen, so a comment or docstring that carries
one fails here, naming the line and what in it reads as a measurement."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "operator"

_COUNT = r"(\d+(\.\d+)?|two|three|four|five|six|seven|eight|nine|ten|a hundred)"
# What reads as a measured figure, by what it says: each a practical mark, not a proof.
MEASURED: dict[str, re.Pattern[str]] = {
    "a duration in ms, us or ns": re.compile(r"\d\s?(ms|us|µs|ns)\b"),
    "a speed ratio": re.compile(
        rf"\b{_COUNT}\s?(x|times|s|ms|seconds)\s(faster|slower|as long|as fast|as much)\b", re.IGNORECASE
    ),
    "a share of a run": re.compile(r"\b(a|one) (third|quarter|fifth|sixth|seventh|eighth|ninth) of\b"),
    "a doubling or halving": re.compile(r"\b(doubled|halved|tripled) the (time|cost|memory)\b"),
    "a percentage": re.compile(r"\d\s?%"),
    "an approximate figure": re.compile(r"\b(about|some|roughly|around|nearly|almost) \d", re.IGNORECASE),
    "a duration in tenths or hundredths of a second": re.compile(r"\b\d+\.\d+\s?s\b"),
    "a range of figures with a unit": re.compile(r"\d(\.\d+)?-\d+(\.\d+)?\s?(s|KiB|MiB|GiB|kB|KB|MB|GB)\b"),
    "an order of magnitude of time": re.compile(r"\b(tens|hundreds|thousands) of (milli|micro|nano)?seconds\b"),
}

# Figures that are not measurements though they read as one: (file under operator/, text on the line) -> why.
ALLOWED: dict[tuple[str, str], str] = {
    ("triton_operator/local/file_watch.py", "acted on 10 ms after it, not watchfiles' default 50 ms"): (
        "QUIET_MS, set below, against watchfiles' documented default"
    ),
    ("triton_operator/client/pool.py", "doubling the wait from 10 ms"): "the retry's first wait, set in close()",
    ("triton_operator/triton/client.py", "a reconnect backoff of 0.1 s for"): "the backoff channel_options sets",
    ("triton_operator/render/drain.py", "max age within +-10% of the setting"): (
        "gRPC core's own jitter, which CONNECTION_AGE_JITTER restates"
    ),
}


def _texts(path: Path) -> Iterator[tuple[int, str]]:
    """Each comment's and each docstring's lines (a string standing alone as a statement), with their line."""
    source = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for offset, line in enumerate(node.value.value.splitlines()):
                yield node.lineno + offset, line


def _hits() -> list[tuple[str, int, str, str]]:
    """(file under operator/, line, what it reads as, the line) for every figure found."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        for line_number, text in _texts(path):
            for what, pattern in MEASURED.items():
                if pattern.search(text):
                    found.append((name, line_number, what, text.strip()))
    return found


def _allowed(name: str, text: str) -> bool:
    return any(name == file and fragment in text for file, fragment in ALLOWED)


def test_no_comment_or_docstring_carries_a_measured_figure() -> None:
    figures = [hit for hit in _hits() if not _allowed(hit[0], hit[3])]
    assert not figures, "measured figures in comments or docstrings (move each to bench/RESULTS.md):\n" + "\n".join(
        f"operator/{name}:{line}: {what}: {text}" for name, line, what, text in figures
    )


def test_every_allowed_figure_is_still_there() -> None:
    hits = {(name, text) for name, _, _, text in _hits()}
    stale = [key for key in ALLOWED if not any(name == key[0] and key[1] in text for name, text in hits)]
    assert not stale, f"allowed figures no longer found (drop them from ALLOWED): {stale}"


def test_the_marks_catch_figures_and_pass_words() -> None:
    def marked(text: str) -> bool:
        return any(pattern.search(text) for pattern in MEASURED.values())

    for figure in (
        "# about 25 us a model",
        "judging (8 ms at 333 models)",
        "a seventh of the time",
        "one walk takes hundreds of milliseconds",
        "46% of its samples",
        "reads them afresh (about 0.3-0.65 ms a stub)",
        "a python model loads 1.2 s faster",
        "their complement takes ten times as long to compile",
        "2.7-3.0 KiB of RSS a live message",
        "reading all again doubled the time",
        "an in-place reload (0.4 s)",
    ):
        assert marked(figure), figure
    for words in (
        "# 0: the keys are replaced on request only",
        "at most 253 characters",
        "a default figure (20 MiB, an empty python model)",
        "the tenth of its models read longest ago",
        '(bench/RESULTS.md, "Measurements behind the design")',
    ):
        assert not marked(words), words
