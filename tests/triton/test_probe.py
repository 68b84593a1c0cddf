"""Probe requests as pure steps: what an answer must be to pass (the config's outputs, expected values,
the stable pod's answer), how many probes a pass sends, how the bake's tally fails a revision, and
which first loads on a pod are probed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from tests.support.models import ADD_CONFIG, add_code, python_model
from triton_operator.api.config_json import parse_model_config
from triton_operator.api.rollout_spec import ProbeSpec, RolloutSpec
from triton_operator.api.status_fields import ProbeCounters
from triton_operator.decide.probe_verdicts import probe_failure, tally
from triton_operator.decide.seen import ParsedModel
from triton_operator.k8s.rollouts.canary_prober import (
    FirstProbe,
    _canary_answer,
    first_load_probes,
    first_probes,
    probe_request,
    probes_due,
)
from triton_operator.protocol.desired import DesiredModel
from triton_operator.triton.client import ModelState
from triton_operator.triton.probe_inputs import SampleRequest
from triton_operator.triton.probe_requests import AnsweredOutput, output_problem
from triton_operator.triton.sync import Outcome, ReplicaReport
from triton_operator.triton.sync_plan import Action

CONFIG = parse_model_config(ADD_CONFIG)  # SUM: FP32 of dims [4], batched
FOUR_FLOATS = np.zeros(4, np.float32).tobytes()

# (id, the outputs answered, why they fail or None)
OUTPUT_RULES: list[tuple[str, list[AnsweredOutput], str | None]] = [
    ("as promised", [AnsweredOutput("SUM", "FP32", (1, 4), FOUR_FLOATS)], None),
    ("none", [], "the response holds no outputs (execute answered with an InferenceResponse without output_tensors)"),
    ("missing", [AnsweredOutput("OTHER", "FP32", (1, 4), FOUR_FLOATS)], "output 'SUM' is missing from the answer"),
    (
        "datatype",
        [AnsweredOutput("SUM", "FP64", (1, 4), FOUR_FLOATS * 2)],
        "output 'SUM' is FP64, the config promises FP32",
    ),
    (
        "shape",
        [AnsweredOutput("SUM", "FP32", (1, 2), FOUR_FLOATS[:8])],
        "output 'SUM' has shape [1, 2], the config promises [1, 4]",
    ),
    ("batch", [AnsweredOutput("SUM", "FP32", (2, 4), FOUR_FLOATS * 2)], "has shape [2, 4], the config promises [1, 4]"),
    ("bytes", [AnsweredOutput("SUM", "FP32", (1, 4), FOUR_FLOATS[:12])], "output 'SUM' holds 12 bytes"),
    (
        "no bytes",
        [AnsweredOutput("SUM", "FP32", (1, 4), b"")],
        "output 'SUM' holds 0 bytes",
    ),  # numpy 2 in the stub answers so
]


@pytest.mark.parametrize(
    ("outputs", "why"), [rule[1:] for rule in OUTPUT_RULES], ids=[rule[0] for rule in OUTPUT_RULES]
)
def test_an_answer_passes_only_as_the_config_promises_it(outputs: list[AnsweredOutput], why: str | None) -> None:
    found = output_problem(CONFIG, outputs, batch=1)
    assert found == why if why is None else why in (found or ""), found


SUM = {"SUM": np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)}
NEAR = {"SUM": SUM["SUM"] + 0.05}
FAR = {"SUM": SUM["SUM"] + 0.5}


@pytest.mark.parametrize(
    ("failure", "outputs", "expected", "stable", "tolerance", "why"),
    [
        ("refused", {}, {}, None, 0.0, "refused"),
        (None, SUM, {}, None, 0.0, None),
        (None, SUM, SUM, None, 0.0, None),
        (None, NEAR, SUM, None, 0.0, "output 'SUM' differs by up to 0.05"),
        (None, NEAR, {}, SUM, 0.1, None),
        (None, FAR, {}, SUM, 0.1, "differs by up to 0.5 (tolerance 0.1) from the stable revision's answer"),
        (None, FAR, {}, None, 0.1, None),  # the stable pod did not answer: nothing to compare
        (None, {}, SUM, None, 0.0, "output 'SUM' is missing from the answer"),
    ],
    ids=[
        "its own failure",
        "no comparison",
        "expected",
        "not expected",
        "stable within",
        "stable beyond",
        "no stable answer",
        "expected missing",
    ],
)
def test_a_canary_answer_fails_on_its_failure_expected_outputs_or_the_stable_answer(
    failure: str | None,
    outputs: dict[str, np.ndarray],
    expected: dict[str, np.ndarray],
    stable: dict[str, np.ndarray] | None,
    tolerance: float,
    why: str | None,
) -> None:
    found = _canary_answer(failure, outputs, expected, stable, tolerance)
    assert found == why if why is None else why in (found or ""), found


@pytest.mark.parametrize(
    ("sent", "max_requests", "per_second", "since_last", "due"),
    [
        (0, 20, 2.0, None, 1),
        (5, 20, 2.0, 0.4, 0),
        (5, 20, 2.0, 2.0, 4),
        (18, 20, 10.0, 5.0, 2),
        (20, 20, 2.0, 9.0, 0),
        (0, 0, 2.0, None, 0),
    ],
    ids=["first", "too soon", "the rate's share", "up to the bound", "bound reached", "probes off"],
)
def test_probes_due_keep_to_the_rate_and_the_bound(
    sent: int, max_requests: int, per_second: float, since_last: float | None, due: int
) -> None:
    assert probes_due(sent, max_requests, per_second, since_last) == due


def test_the_tally_adds_each_pass_and_keeps_the_last_reason() -> None:
    traceback = "Failed to process the request(s), message: RuntimeError: broken\n\nAt:\n  model.py(10): execute\n"
    tallied = tally(
        {"triton-0": ProbeCounters(sent=3, failed=1, last_failure="old")},
        {"triton-0": [None, traceback, None], "triton-1": [None]},
    )
    assert tallied == {
        "triton-0": ProbeCounters(
            sent=6, failed=2, last_failure="Failed to process the request(s), message: RuntimeError: broken"
        ),
        "triton-1": ProbeCounters(sent=1),
    }


@pytest.mark.parametrize(
    ("counters", "ratio", "baked", "why"),
    [
        (ProbeCounters(sent=5), 0.01, False, None),
        (
            ProbeCounters(sent=1, failed=1, last_failure="broken"),
            0.01,
            False,
            "1 of 1 probe requests failed on pod triton-0: 'broken'",
        ),
        (
            ProbeCounters(sent=2, failed=1, last_failure="slow"),
            0.1,
            False,
            None,
        ),  # 1 of the bake's 20 may still be within 10%
        (
            ProbeCounters(sent=2, failed=1, last_failure="slow"),
            0.1,
            True,
            "1 of 2 probe requests failed",
        ),  # the bake is over: 2 sent
        (ProbeCounters(sent=20, failed=2, last_failure="slow"), 0.1, True, None),
    ],
    ids=["no failure", "one of 20 above 1%", "within while baking", "above at the end", "at the ratio"],
)
def test_probe_failures_fail_the_revision_once_no_later_success_can_bring_them_under_the_ratio(
    counters: ProbeCounters, ratio: float, baked: bool, why: str | None
) -> None:
    found = probe_failure({"triton-0": counters}, ["triton-0"], ProbeSpec(max_requests=20), ratio, baked)
    assert found == why if why is None else why in (found or ""), found


ADD = python_model("add", ADD_CONFIG, add_code())
OTHER = replace(ADD, revision="other")
LOADED = Outcome(Action("load", "add"))
RELOADED = Outcome(Action("reload", "add"))
FAILED = FirstProbe(ADD.revision, "it loaded, but its first probe request failed: 'broken'")


def ready_at(revision: str, *outcomes: Outcome) -> ReplicaReport:
    return ReplicaReport("x", outcomes=list(outcomes), states={"add": ModelState("add", ready=True, revision=revision)})


# (id, what the pod's last syncs kept, this sync's report, the revision desired, whether the model's first load is
# probed, the probes after it)
FIRST_PROBES: list[tuple[str, dict[str, FirstProbe], ReplicaReport, DesiredModel, bool, dict[str, FirstProbe]]] = [
    ("first load", {}, ready_at(ADD.revision, LOADED), ADD, True, {"add": FirstProbe(ADD.revision)}),
    ("not probed", {}, ready_at(ADD.revision, LOADED), ADD, False, {}),
    ("a reload is the canary's", {}, ready_at(ADD.revision, RELOADED), ADD, True, {}),
    (
        "a load that failed",
        {},
        ReplicaReport("x", outcomes=[Outcome(Action("load", "add"), error="bad")]),
        ADD,
        True,
        {},
    ),
    ("ready, nothing loaded", {}, ready_at(ADD.revision), ADD, True, {}),
    ("failed stays", {"add": FAILED}, ready_at(ADD.revision), ADD, True, {"add": FAILED}),
    (
        "failed, reloaded at a new revision",
        {"add": FAILED},
        ready_at(OTHER.revision, RELOADED),
        OTHER,
        True,
        {"add": FirstProbe(OTHER.revision)},
    ),
    ("failed, its new revision loading", {"add": FAILED}, ready_at(ADD.revision), OTHER, True, {"add": FAILED}),
    ("failed, then unloaded", {"add": FAILED}, ReplicaReport("x"), ADD, True, {}),
    (
        "due again (saved again)",
        {"add": FirstProbe(ADD.revision)},
        ready_at(ADD.revision),
        ADD,
        True,
        {"add": FirstProbe(ADD.revision)},
    ),
]


@pytest.mark.parametrize(
    ("kept", "report", "desired", "probed", "after"),
    [row[1:] for row in FIRST_PROBES],
    ids=[row[0] for row in FIRST_PROBES],
)
def test_first_probes_are_due_after_a_first_load_and_failures_stay_while_the_model_runs(
    kept: dict[str, FirstProbe],
    report: ReplicaReport,
    desired: DesiredModel,
    probed: bool,
    after: dict[str, FirstProbe],
) -> None:
    assert first_probes(kept, report, {"add": desired}, {"add"} if probed else set()) == after


def parsed(name: str, rollout: dict[str, Any] | None) -> ParsedModel:
    spec = {"serverRef": {"name": "triton"}, "config": ADD_CONFIG} | (
        {"rollout": rollout} if rollout is not None else {}
    )
    return ParsedModel.of(
        {
            "apiVersion": "triton-operator.io/v1alpha1",
            "kind": "TritonModel",
            "metadata": {"name": name, "namespace": "ml", "uid": name},
            "spec": spec,
        }
    )


@pytest.mark.parametrize(
    ("own", "server", "probed"),
    [
        (None, "AllAtOnce", False),
        (None, "Canary", True),
        ({"strategy": "Canary"}, "AllAtOnce", True),
        ({"probe": {"onFirstLoad": True}}, "AllAtOnce", True),
        ({"probe": {"onFirstLoad": False}}, "Canary", False),
        ({"strategy": "AllAtOnce", "probe": {"maxRequests": 5}}, "Canary", False),
    ],
    ids=["all-at-once", "server-canary", "own-canary", "opted-in", "opted-out", "own-all-at-once"],
)
def test_a_first_load_is_probed_where_asked_and_by_default_under_canary(
    own: dict[str, Any] | None, server: str, probed: bool
) -> None:
    probes = first_load_probes([parsed("add", own)], RolloutSpec(strategy=server))  # type: ignore[arg-type]
    assert ("add" in probes) == probed


DECOUPLED = python_model("add_stream", ADD_CONFIG | {"modelTransactionPolicy": {"decoupled": True}}, add_code())


@pytest.mark.parametrize(
    ("model", "probe", "sent"),
    [(ADD, ProbeSpec(), True), (DECOUPLED, ProbeSpec(), True), (ADD, ProbeSpec(max_requests=0), False)],
    ids=["unary", "decoupled", "probes off"],
)
def test_a_decoupled_model_gets_probe_requests_as_a_unary_one_does(
    model: DesiredModel, probe: ProbeSpec, sent: bool
) -> None:
    """Its probe goes on a stream (triton/probe_requests.py): the canary and the first-load probe send it."""
    request = probe_request(model, model.parsed_config(), probe)
    assert isinstance(request, SampleRequest) == sent, request
