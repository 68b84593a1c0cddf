"""The batching verdict of a server's models, from the Triton statistics each pass read from its pods
(the worker exports it as metrics)."""

from __future__ import annotations

from ..render.fleet import RenderedServer
from ..triton.batching import BatchingSummary, StatisticsTracker, Window, summarize
from . import conditions as c
from .seen import Pass


class BatchingJudge:
    """Remembers Triton's counters at the last read and each model's last verdict."""

    def __init__(self) -> None:
        self.statistics = StatisticsTracker()  # Triton's counters per (pod uid, model, revision) at the last read
        self.verdicts: dict[str, tuple[str, BatchingSummary]] = {}  # Triton model -> (revision, last judged summary)
        self.read: list[tuple[str, str, str]] = []  # the (pod uid, model, revision) keys of the counters kept

    def verdict(self, model: str) -> BatchingSummary | None:
        judged = self.verdicts.get(model)
        return judged[1] if judged else None

    def judge(self, rendered: RenderedServer, this_pass: Pass) -> set[str]:
        """Each model's batching since the last pass, summed over its pods. A window with too little
        traffic keeps the last verdict of the same revision, so a quiet minute does not erase it.
        The models no longer judged, whose metrics go."""
        windows: dict[str, list[Window]] = {}
        read: list[tuple[str, str, str]] = []
        for pod in this_pass.pods:
            report = this_pass.reports.get(pod.name)
            for name, counters in this_pass.statistics.get(pod.name, {}).items():
                state = report.states.get(name) if report else None
                key = (pod.uid, name, state.revision if state else "")  # a reload starts a new window
                windows.setdefault(name, []).append(self.statistics.read(key, counters))
                read.append(key)
        waiting = {pod.uid for pod in this_pass.pods if pod.name in this_pass.waiting}
        read += [key for key in self.read if key[0] in waiting]  # a pod still syncing keeps its last read
        self.statistics.retain(read)
        self.read = read
        judged: dict[str, tuple[str, BatchingSummary]] = {}
        for model in rendered.models:
            name, revision = model.name, model.revision
            last = self.verdicts.get(name)
            current = last if last is not None and last[0] == revision else None  # this revision's last verdict
            if name in windows:
                first, *others = windows[name]
                summary = summarize(name, model.desired.parsed_config(), sum(others, first))
                if current is None or summary.reason != c.NOT_ENOUGH_TRAFFIC:
                    current = (revision, summary)
            if current is not None:
                judged[name] = current
        gone = self.verdicts.keys() - judged.keys()
        self.verdicts = judged
        return gone

    def summaries(self) -> dict[str, BatchingSummary]:
        """Each judged model's last verdict, by Triton name."""
        return {name: summary for name, (_, summary) in self.verdicts.items()}
