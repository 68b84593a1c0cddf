"""Models that read ready but fail every request, and reloading them: pure decisions and their memory.

Measured on Triton 2.5x (the nvidia-pytriton wheel, python backend, CPU): a python model whose
execute() ends its own process (os._exit, a segfault in native code) fails that request and every
later one with INTERNAL "Stub process '<model>_0_0' is not healthy", while the repository index,
is_model_ready and the health endpoints go on saying ready, and Triton logs nothing. Its statistics
count each such request as `fail` and none as `success`. A load with the same config is a no-op (still
failing); a load whose config differs in one parameter is an in-place reload that starts a new stub,
serves again and starts the counters from zero (docs/triton-facts.md, "A stub that ended its process").

So a model is taken for broken on a pod when its requests between two reads of the statistics are
all failures, at least `failures_in_a_row` of them: a client sending bad inputs now and then does not
look like that, a dead stub does at once. It is reloaded there with a config that differs only in
RESTART_PARAMETER (DesiredModel.restarted), and the next reload waits a doubling back-off, so a model that
crashes on every request is reloaded a handful of times an hour, not in a loop. A new revision starts the
count again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .batching import ModelStatistics


@dataclass(frozen=True)
class HealPolicy:
    failures_in_a_row: int = 3  # failed requests between two reads, with none answered
    first_backoff_seconds: float = 30.0
    max_backoff_seconds: float = 1800.0

    def backoff(self, heals: int) -> float:
        """How long after its `heals`-th reload a model may be reloaded again."""
        return min(self.first_backoff_seconds * 2.0 ** (heals - 1), self.max_backoff_seconds)


def failing_every_request(
    before: Mapping[str, ModelStatistics], after: Mapping[str, ModelStatistics], failures_in_a_row: int
) -> dict[str, int]:
    """The models whose requests between the two reads all failed, at least `failures_in_a_row`, with
    how many failed. A model reloaded between the reads (its counters went down) or not read twice is
    not judged."""
    failing = {}
    for name, now in after.items():
        earlier = before.get(name)
        window = now.minus(earlier) if earlier is not None else None
        if window is not None and window.requests == 0 and window.failures >= failures_in_a_row:
            failing[name] = window.failures
    return failing


@dataclass(frozen=True)
class Heal:
    """A reload of a model found failing every request on one replica."""

    model: str
    restart: int  # how many times it was reloaded so far at this revision, this one included
    failures: int  # the failed requests that showed it


class Healer:
    """One replica's memory of what it reloaded: per model, the revision, how many times, when a next
    reload may come, and a note for the model's status."""

    def __init__(self, policy: HealPolicy = HealPolicy()):
        self.policy = policy
        self._statistics: dict[str, ModelStatistics] = {}
        self._heals: dict[str, tuple[str, int, float]] = {}  # model -> (revision, reloads, not before)
        self.notes: dict[str, str] = {}  # model -> what was last found or done about it

    def decide(self, statistics: Mapping[str, ModelStatistics], revisions: Mapping[str, str], now: float) -> list[Heal]:
        """From a new read of the statistics and the revision each of our models should run: the reloads
        to run now. A failing model whose back-off has not passed gets a note saying so instead."""
        failing = failing_every_request(self._statistics, statistics, self.policy.failures_in_a_row)
        self._statistics = dict(statistics)
        self._heals = {name: heal for name, heal in self._heals.items() if revisions.get(name) == heal[0]}
        self.notes = {name: note for name, note in self.notes.items() if name in self._heals}
        heals = []
        for name, failures in sorted(failing.items()):
            if name not in revisions:
                continue  # not ours: left as it runs
            _, reloads, not_before = self._heals.get(name, ("", 0, now))
            if now < not_before:
                self.notes[name] = (
                    f"{failures} requests failed in a row, none answered; reloaded {reloads} "
                    f"times, the next reload waits {not_before - now:.0f}s"
                )
                continue
            self._heals[name] = (revisions[name], reloads + 1, now + self.policy.backoff(reloads + 1))
            heals.append(Heal(name, reloads + 1, failures))
        return heals

    def done(self, heal: Heal, error: str = "") -> None:
        """Note a reload's outcome for the model's status."""
        what = (
            f"{heal.failures} requests failed in a row, none answered (a crashed "
            "python stub answers 'Stub process ... is not healthy')"
        )
        self.notes[heal.model] = f"{what}: reloaded ({heal.restart} times at this revision)" + (
            f", and the reload failed: {error}" if error else ""
        )
