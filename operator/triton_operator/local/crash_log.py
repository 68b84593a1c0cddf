"""What Triton's log says of its death: the models it was loading, and its own lines that say why.

Its own module because it is a reading of Triton's log, pure and table-tested, apart from the process
that writes it (local/tritonserver.py) and the loop that acts on it (local/runner.py).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

# Triton's log lines that follow a model's load: its start, and each way it ends.
LOAD_STARTED = re.compile(r"loading: (?P<model>[^:\"]+):\d+")
LOAD_ENDED = re.compile(r"(?:successfully loaded|failed to load) '(?P<model>[^']+)'")
# What Triton prints on a signal it handles, before its stack trace; SIGINT and SIGTERM start its own clean exit.
SIGNAL_RECEIVED = re.compile(r"^Signal \((?P<number>\d+)\) received\.")
CLEAN_EXIT_SIGNALS = {signal.SIGINT, signal.SIGTERM}
# The most of Triton's lines a crash is told with: the model's own and those from the fatal signal on.
CRASH_LINES = 40


@dataclass(frozen=True)
class Crash:
    """Triton's death as its log tells it: the models it was loading, and its lines that say why."""

    loading: list[str]
    lines: list[str]
    signalled: bool  # Triton logged a fatal signal: it dies once it has printed its stack trace


def crash_in_log(log: str) -> Crash:
    """The models whose load Triton had started and not ended when it died (at the fatal signal it logged,
    else at the log's end: SIGKILL leaves no line), and the lines that tell it: each naming such a model,
    and every line from the fatal signal on (its stack trace). Pure, for one run's log."""
    lines = log.splitlines()
    fatal = next(
        (
            index
            for index, line in enumerate(lines)
            if (received := SIGNAL_RECEIVED.match(line)) and int(received["number"]) not in CLEAN_EXIT_SIGNALS
        ),
        len(lines),
    )
    loading: dict[str, None] = {}
    for line in lines[:fatal]:
        if started := LOAD_STARTED.search(line):
            loading[started["model"]] = None
        elif ended := LOAD_ENDED.search(line):
            loading.pop(ended["model"], None)
    # A model's name, or an instance's (add_0), as a word: a short name is in many other words.
    named = re.compile("|".join(rf"(?<![\w.-]){re.escape(model)}(?:_\d+)?(?![\w.-])" for model in loading) or "$^")
    told = [line for line in lines[:fatal] if named.search(line)] + [line for line in lines[fatal:] if line.strip()]
    return Crash(list(loading), told[-CRASH_LINES:], signalled=fatal < len(lines))
