"""Canary rollouts as pure steps: where a rollout goes from its written state, the spec and what a pass
saw (decide/rollout_plan.py), and the revision ConfigMap a rollback loads from (render/revisions.py)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from tests.support.crd_check import crd_errors
from tests.support.models import ADD_CONFIG, add_code
from tests.support.resources import SERVER, model_document
from triton_operator.api.resources import TritonModel, TritonServer
from triton_operator.api.rollout_spec import ModelRolloutSpec, ProbeSpec, RolloutSpec, effective_rollout
from triton_operator.api.status_fields import RolloutStatus, WindowCounters
from triton_operator.decide.rollout_plan import (
    BAKING,
    PROGRESSING,
    ROLLED_BACK,
    STABLE,
    assignment,
    begin,
    judge,
    timestamp,
)
from triton_operator.k8s.expectations import Expectations
from triton_operator.k8s.rollouts.rollout_writes import Rollouts
from triton_operator.k8s.watch.indexes import config_map_view
from triton_operator.local.local_state import LocalState
from triton_operator.local.runner import _read, cluster_only
from triton_operator.protocol.desired import DesiredModel
from triton_operator.protocol.triton_proto import model_config_pb2
from triton_operator.render.fleet import plan_fleet
from triton_operator.render.revisions import desired_from_config_map, revision_config_map
from triton_operator.triton.batching import ModelStatistics
from triton_operator.triton.client import ModelState
from triton_operator.triton.sync import ReplicaReport

CANARY = RolloutSpec(strategy="Canary", pods=1, bakeSeconds=10, minRequests=20, maxFailureRatio=0.05, maxLatencyRatio=2)
PODS = ["triton-0", "triton-1", "triton-2"]
START = datetime.datetime(2026, 11, 23, 12, 0, tzinfo=datetime.UTC)
# A kept revision's config.
SERIALIZED = model_config_pb2.ModelConfig(name="m").SerializeToString(deterministic=True)


def baking(**changes: object) -> RolloutStatus:
    record = RolloutStatus(
        phase=BAKING,
        revision="new",
        stable_revision="old",
        canary_pods=["triton-0"],
        bake_started_at=timestamp(START),
        baseline={pod: WindowCounters(requests=100, request_ns=100 * 10**6) for pod in PODS[1:]},
    )
    return record.model_copy(update=changes)


def reports(canary_revision: str = "new", failed: str = "") -> dict[str, ReplicaReport]:
    out = {}
    for pod in PODS:
        revision = canary_revision if pod == "triton-0" else "old"
        report = ReplicaReport(pod, states={"add": ModelState("add", ready=True, revision=revision)})
        if failed and pod == "triton-0":
            report.failed["add"] = failed
        out[pod] = report
    return out


def statistics(
    canary: ModelStatistics, others_ms: float = 10.0, others_requests: int = 200
) -> dict[str, dict[str, ModelStatistics]]:
    """Counters now: the canary's since its load; the others' on top of their baseline (100 requests at 1 ms)."""
    others = ModelStatistics(
        requests=100 + others_requests, request_ns=100 * 10**6 + int(others_requests * others_ms * 1e6)
    )
    return {"triton-0": {"add": canary}, "triton-1": {"add": others}, "triton-2": {"add": others}}


def after(seconds: float) -> datetime.datetime:
    return START + datetime.timedelta(seconds=seconds)


def test_the_first_revision_is_stable_at_once_and_a_new_one_starts_on_the_first_pods_in_service() -> None:
    first = begin(None, CANARY, "old", True, PODS, PODS)
    assert first is not None and (first.phase, first.stable_revision) == (STABLE, "old")
    assert begin(first, CANARY, "old", True, PODS, PODS) is first
    started = begin(first, CANARY.model_copy(update={"pods": "50%"}), "new", True, PODS, PODS)
    assert started is not None and started.phase == PROGRESSING and started.canary_pods == ["triton-0", "triton-1"]
    assert begin(first, RolloutSpec(), "new", True, PODS, PODS) is None  # AllAtOnce keeps no rollout


def test_a_new_pod_is_no_canary_and_a_vanished_canary_is_replaced() -> None:
    record = baking()
    assert begin(record, CANARY, "new", True, PODS, [*PODS, "triton-3"]) is record
    replaced = begin(record, CANARY, "new", True, ["triton-1", "triton-2"], ["triton-1", "triton-2"])
    assert replaced is not None and replaced.phase == PROGRESSING and replaced.canary_pods == ["triton-1"]


def test_without_the_stable_revision_kept_the_new_one_is_applied_at_once_and_said_so() -> None:
    record = begin(RolloutStatus(phase=STABLE, revision="old", stable_revision="old"), CANARY, "new", False, PODS, PODS)
    assert record is not None and record.phase == STABLE and record.stable_revision == "new"
    assert "nothing to roll back to" in record.message


def test_a_rolled_back_revision_is_not_tried_again_until_the_spec_changes() -> None:
    rolled_back = baking(phase=ROLLED_BACK)
    assert begin(rolled_back, CANARY, "new", True, PODS, PODS) is rolled_back
    assert begin(rolled_back, CANARY, "new", False, PODS, PODS) is rolled_back  # even with nothing kept to load again
    again = begin(rolled_back, CANARY, "newer", True, PODS, PODS)
    assert again is not None and (again.phase, again.revision) == (PROGRESSING, "newer")
    reverted = begin(rolled_back, CANARY, "old", True, PODS, PODS)
    assert reverted is not None and reverted.phase == STABLE and reverted.revision == "old"


def test_the_bake_begins_when_every_canary_serves_the_new_revision_with_the_counters_then() -> None:
    record = baking(phase=PROGRESSING, bake_started_at=None, baseline={})
    assert judge(record, CANARY, "add", reports(canary_revision="old"), {}, START).record is record
    started = judge(record, CANARY, "add", reports(), statistics(ModelStatistics(requests=3)), START).record
    assert started.phase == BAKING and started.bake_started_at == timestamp(START)
    assert started.baseline["triton-0"].requests == 3 and started.baseline["triton-1"].requests == 300


def test_with_no_bake_and_no_minimum_the_canary_is_promoted_as_soon_as_it_serves() -> None:
    record = baking(phase=PROGRESSING, bake_started_at=None, baseline={})
    instant = CANARY.model_copy(update={"bake_seconds": 0, "min_requests": 0})
    verdict = judge(record, instant, "add", reports(), statistics(ModelStatistics()), START)
    assert verdict.outcome == "promoted" and verdict.record.stable_revision == "new"


def test_failures_above_the_ratio_roll_back_at_once_with_the_figures() -> None:
    at_the_ratio = judge(
        baking(), CANARY, "add", reports(), statistics(ModelStatistics(requests=228, failures=12)), after(2)
    )
    assert at_the_ratio.outcome is None and at_the_ratio.record.phase == BAKING  # 5.0% is not above 5%
    verdict = judge(
        baking(), CANARY, "add", reports(), statistics(ModelStatistics(requests=220, failures=20)), after(2)
    )
    assert verdict.outcome == "rolled_back" and verdict.record.phase == ROLLED_BACK
    assert "20 of 240 requests failed on pod triton-0 (8.3% > 5.0%)" in verdict.record.message
    assert "revision old serves on every pod" in verdict.record.message


def test_probe_answers_add_to_the_tally_and_error_responses_roll_back_though_triton_counts_none_failed() -> None:
    counted_good = statistics(ModelStatistics(requests=30))  # Triton counts error responses as successes
    probe = ProbeSpec(max_requests=10)  # at a 5% ratio, a first failure of 10 is too many
    kept = judge(baking(), CANARY, "add", reports(), counted_good, after(2), probe, {"triton-0": [None, None]})
    assert kept.outcome is None and kept.record.probes["triton-0"].sent == 2
    verdict = judge(
        kept.record, CANARY, "add", reports(), counted_good, after(3), probe, {"triton-0": ["this revision is broken"]}
    )
    assert verdict.outcome == "rolled_back"
    assert "1 of 3 probe requests failed on pod triton-0: 'this revision is broken'" in verdict.record.message
    promoted = judge(
        kept.record,
        CANARY,
        "add",
        reports(),
        statistics(ModelStatistics(requests=300)),
        after(11),
        probe,
        {"triton-0": [None]},
    )
    assert promoted.outcome == "promoted" and "3 probe requests, 0 failed" in promoted.record.message


def test_a_load_triton_refuses_on_a_canary_is_a_rollback() -> None:
    verdict = judge(
        baking(phase=PROGRESSING), CANARY, "add", reports(canary_revision="old", failed="boom in initialize"), {}, START
    )
    assert (
        verdict.outcome == "rolled_back"
        and "Triton refused revision new on pod triton-0: boom in initialize" in verdict.record.message
    )


def test_a_good_canary_is_promoted_only_after_the_bake_and_min_requests() -> None:
    good = statistics(ModelStatistics(requests=240, request_ns=240 * 11 * 10**6))
    assert judge(baking(), CANARY, "add", reports(), good, after(5)).outcome is None
    few = statistics(ModelStatistics(requests=5, request_ns=5 * 10**6))
    waiting = judge(baking(), CANARY, "add", reports(), few, after(11))
    assert waiting.outcome is None and waiting.record.message.startswith("waiting for traffic")
    held = judge(baking(), CANARY, "add", reports(), few, after(11 + CANARY.max_wait_seconds))
    assert held.outcome is None and held.record.message.startswith("not enough traffic") and held.record.holding
    assert not waiting.record.holding
    promoted = judge(baking(), CANARY, "add", reports(), good, after(11))
    assert promoted.outcome == "promoted"
    assert (promoted.record.phase, promoted.record.stable_revision, promoted.record.previous_revision) == (
        STABLE,
        "new",
        "old",
    )
    assert "time in Triton 11.0 ms per request against 10.0 ms on the other pods" in promoted.record.message


FEW = statistics(ModelStatistics(requests=5, request_ns=5 * 10**6))
HELD_AT = 11 + CANARY.max_wait_seconds


@pytest.mark.parametrize(
    ("spec", "seen", "seconds", "phase", "holding"),
    [
        (CANARY, FEW, HELD_AT + 60, BAKING, True),  # still too little traffic: it goes on holding
        (
            CANARY,
            {"triton-1": FEW["triton-1"]},
            HELD_AT + 60,
            BAKING,
            True,
        ),  # the canary not read: judged on the next pass, as it stood
        (
            CANARY.model_copy(update={"max_wait_seconds": 10 * HELD_AT}),
            FEW,
            HELD_AT + 60,
            BAKING,
            None,
        ),  # more time to wait: waiting again
        (
            CANARY.model_copy(update={"bake_seconds": 10 * HELD_AT}),
            FEW,
            HELD_AT + 60,
            BAKING,
            None,
        ),  # a longer bake: baking again
        (
            CANARY,
            statistics(ModelStatistics(requests=240, request_ns=240 * 11 * 10**6)),
            HELD_AT + 60,
            STABLE,
            None,
        ),  # traffic came: promoted
        (
            CANARY,
            statistics(ModelStatistics(requests=100, failures=100)),
            HELD_AT + 60,
            ROLLED_BACK,
            None,
        ),  # failures came: rolled back
    ],
    ids=["still-held", "canary-unread", "longer-wait", "longer-bake", "promoted", "rolled-back"],
)
def test_a_held_rollout_says_so_until_it_is_not(
    spec: RolloutSpec, seen: dict[str, dict[str, ModelStatistics]], seconds: float, phase: str, holding: bool | None
) -> None:
    held = judge(baking(), CANARY, "add", reports(), FEW, after(HELD_AT)).record
    assert (
        held.holding is True
        and RolloutStatus.model_validate(held.model_dump(mode="json", by_alias=True, exclude_none=True)).holding is True
    )
    record = judge(held, spec, "add", reports(), seen, after(seconds)).record
    assert (record.phase, record.holding) == (phase, holding)
    assert ("holding" in record.model_dump(by_alias=True, exclude_none=True)) == bool(
        holding
    )  # written only while it holds


def test_a_slower_canary_is_rolled_back_by_the_latency_ratio_over_the_same_window() -> None:
    slow = statistics(ModelStatistics(requests=240, request_ns=240 * 50 * 10**6))
    verdict = judge(baking(), CANARY, "add", reports(), slow, after(11))
    assert verdict.outcome == "rolled_back"
    assert "time in Triton 50.0 ms per request against 10.0 ms on the other pods (5.0x > 2x)" in verdict.record.message
    unjudged = judge(baking(), CANARY.model_copy(update={"max_latency_ratio": None}), "add", reports(), slow, after(11))
    assert unjudged.outcome == "promoted"


def test_the_assignment_gives_canaries_the_new_revision_and_the_rest_the_stable_one() -> None:
    new, old = DesiredModel("add", "new", b""), DesiredModel("add", "old", b"")
    assert assignment(baking(), new, old) == (old, ["triton-0"])
    assert assignment(baking(phase=ROLLED_BACK), new, old) == (old, [])
    assert assignment(None, new, None) == (new, [])


def test_a_kept_revision_round_trips_exactly_and_an_edited_one_is_not_used() -> None:
    model = TritonModel.model_validate(model_document({"backend": "python"}))
    desired = DesiredModel(
        "m", "abc", SERIALIZED, {"1/model.py": b"print(1)\n", "labels.txt": bytes(range(256))}, frozenset({"step"})
    )
    config_map = revision_config_map(model, desired)
    assert config_map["metadata"]["name"] == "m-revision-abc"
    assert config_map["metadata"]["labels"]["triton-operator.io/revision"] == "abc"
    assert desired_from_config_map("m", "abc", config_map) == desired
    del config_map["binaryData"]["file-0"]
    assert desired_from_config_map("m", "abc", config_map) is None


@pytest.mark.parametrize("pods", [0, "0%", "150%", "half"])
def test_canary_pods_must_be_a_count_or_a_percent(pods: object) -> None:
    document = model_document({"backend": "python"}, rollout={"strategy": "Canary", "pods": pods})
    with pytest.raises(ValidationError, match="pods is a count of at least 1 or a percent"):
        TritonModel.model_validate(document)
    assert crd_errors(document), "the CRD's schema and CEL rules refuse it too"


def test_canary_count_rounds_a_percent_up_within_the_pods_in_service() -> None:
    assert [RolloutSpec(pods="25%").canary_count(n) for n in (1, 3, 4, 5, 8)] == [1, 1, 1, 2, 2]
    assert RolloutSpec(pods=5).canary_count(3) == 3


def test_local_mode_says_a_canary_applies_in_a_cluster_only() -> None:
    spec = {**SERVER["spec"], "rollout": {"strategy": "Canary"}, "modelRepository": {"pvc": {"claimName": "models"}}}
    server = TritonServer.model_validate(
        {**SERVER, "metadata": {"name": "triton", "namespace": "default"}, "spec": spec}
    )
    canary = model_document(ADD_CONFIG)
    all_at_once = model_document(ADD_CONFIG, rollout={"strategy": "AllAtOnce"}, modelName="other")
    all_at_once["metadata"] = {"name": "other", "namespace": "default"}
    fleet = plan_fleet([server], [TritonModel.model_validate(canary), TritonModel.model_validate(all_at_once)])
    [rendered] = fleet.servers
    assert len(rendered.models) == 2, fleet.findings
    [note] = cluster_only(rendered)
    assert note.startswith("TritonModel/default/m: spec.rollout strategy Canary applies in a cluster only")


def test_the_index_keeps_a_kept_revision_whole_and_a_config_configmap_as_its_digest() -> None:
    model = TritonModel.model_validate(model_document({"backend": "python"}))
    desired = DesiredModel("m", "abc", SERIALIZED, {"1/model.py": b"print(1)\n"})
    kept = config_map_view(revision_config_map(model, desired), named=False)
    assert desired_from_config_map("m", "abc", kept) == desired
    config = config_map_view(
        {"metadata": {"labels": {"app.kubernetes.io/managed-by": "triton-operator"}}, "data": {"config.pbtxt": "x"}},
        named=False,
    )
    assert config.keys() == {"digest", "controller"}


class KeptRevisions:
    """Stands in for the operator's indexes: the revision ConfigMaps it holds."""

    def __init__(self, *config_maps: dict[str, Any]):
        self.config_maps = {config_map["metadata"]["name"]: config_map for config_map in config_maps}

    def config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.config_maps.get(name)


def test_a_kept_revision_loads_within_the_specs_load_timeout() -> None:
    """A revision ConfigMap carries what runs, not how long it may take to load: a rollback loads the
    stable revision within the model's spec.loadTimeoutSeconds as it is now."""
    model = TritonModel.model_validate(model_document({"backend": "python"}))
    stable = DesiredModel("m", "old", SERIALIZED, {"1/model.py": b"print(1)\n"}, load_timeout_seconds=60)
    candidate = DesiredModel("m", "new", SERIALIZED, {"1/model.py": b"print(2)\n"}, load_timeout_seconds=1800)
    kept_revisions = KeptRevisions(revision_config_map(model, stable))
    rollouts = Rollouts(("default", "triton"), kept_revisions, api=None, expectations=Expectations())  # type: ignore[arg-type]
    record = RolloutStatus(phase=BAKING, revision="new", stable_revision="old")
    kept = rollouts._stable("m", "m", record, candidate)
    assert kept is not None and kept.revision == "old" and kept.load_timeout_seconds == 1800


@pytest.mark.parametrize(
    ("own", "strategy"),
    [
        (None, "Canary"),
        (
            {"probe": {"inputs": [{"name": "A", "datatype": "FP32", "shape": [1], "data": [1.0]}]}},
            "Canary",
        ),  # a probe alone keeps the server's
        ({"strategy": "AllAtOnce"}, "AllAtOnce"),
        ({"bakeSeconds": 5}, "AllAtOnce"),  # rollout settings of its own replace the server's whole
    ],
    ids=["unset", "probe-only", "own-strategy", "own-settings"],
)
def test_a_models_rollout_holding_only_a_probe_follows_its_servers(own: dict[str, Any] | None, strategy: str) -> None:
    server = RolloutSpec.model_validate({"strategy": "Canary", "pods": 1})
    mine = ModelRolloutSpec.model_validate(own) if own is not None else None
    assert effective_rollout(mine, server).strategy == strategy


def test_local_mode_says_so_once_however_often_the_files_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each save rereads every file: the note is printed the first time only."""
    spec = {**SERVER["spec"], "rollout": {"strategy": "Canary"}, "modelRepository": {"pvc": {"claimName": "models"}}}
    files = tmp_path / "crs.yaml"
    files.write_text(yaml.safe_dump_all([{**SERVER, "spec": spec}, model_document(ADD_CONFIG)]))
    (tmp_path / "repository" / "m" / "1").mkdir(parents=True)
    (tmp_path / "repository" / "m" / "1" / "model.py").write_bytes(add_code())
    state = LocalState()
    for _ in range(3):
        _read([str(files)], None, tmp_path / "repository", state)
    assert capsys.readouterr().err.count("spec.rollout strategy Canary applies in a cluster only") == 1
