"""Which models kill a server's tritonservers, as its pods' syncs see it: the loads under way on each pod
(from the sync's progress) and each restart of a pod's tritonserver container, counted against them by
decide/crashes.py's rule. Its own module because the pod sync (k8s/pods/pod_sync.py) only asks it what to hold back."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ...decide.crashes import CrashRecord, ServerDeath, count_deaths, held_back
from ...decide.seen import Pod
from ...protocol.desired import DesiredModel
from ...triton.sync import Outcome
from ...triton.sync_plan import Action


class CrashWatch:
    """One server's memory of its pods' restarts, the loads under way on them, and the deaths counted."""

    def __init__(self, server: str):
        self.server = server
        self.restarts: dict[str, int] = {}  # pod uid -> its tritonserver's restartCount when last seen
        self.running: dict[str, set[str]] = {}  # pod uid -> models whose load runs there
        self.cut: dict[str, set[str]] = {}  # pod uid -> models whose load ended as the pod went away
        self.records: dict[str, CrashRecord] = {}

    def progress(self, uid: str, action: Action, outcome: Outcome | None) -> None:
        """A load starts or ends on the pod: one the pod's going away ended was under way when it died."""
        if action.kind == "unload":
            return
        running = self.running.setdefault(uid, set())
        if outcome is None:
            running.add(action.model)
            return
        running.discard(action.model)
        if outcome.interrupted:
            self.cut.setdefault(uid, set()).add(action.model)

    def died(self, pod: Pod, desired: Mapping[str, DesiredModel]) -> bool:
        """Count the pod's tritonserver restarts since it was last seen against the loads under way on it;
        True when it restarted (the caller then forgets what its sync remembered of the pod's Triton)."""
        before = self.restarts.get(pod.uid)
        self.restarts[pod.uid] = max(pod.restarts, before or 0)
        deaths = pod.restarts - before if before is not None and pod.restarts > before else 0
        if deaths:
            loading = frozenset(self.running.pop(pod.uid, set()) | self.cut.pop(pod.uid, set()))
            death = ServerDeath(pod.name, pod.last_exit or "its tritonserver restarted", loading)
            self.records = count_deaths(self.records, [death] * deaths, {n: m.revision for n, m in desired.items()})
        return deaths > 0

    def order(self, desired: Mapping[str, DesiredModel], keep: set[str]) -> tuple[dict[str, DesiredModel], set[str]]:
        """What a pod's sync is given: the held-back models are left as they run (a copy ready on a pod keeps
        serving) and count for nothing."""
        held = self.held_back(desired)
        return {name: model for name, model in desired.items() if name not in held}, keep | held.keys()

    def held_back(self, desired: Mapping[str, DesiredModel]) -> dict[str, str]:
        """The declared models held back at the revision they should run, each with why."""
        revisions = {name: model.revision for name, model in desired.items()}
        current = {name: record for name, record in self.records.items() if revisions.get(name) == record.revision}
        return held_back(current, self.server)

    def retain(self, uids: Iterable[str]) -> None:
        """Forget the pods that are gone."""
        staying = set(uids)
        for memory in (self.restarts, self.running, self.cut):
            for uid in memory.keys() - staying:
                del memory[uid]
