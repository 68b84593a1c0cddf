"""Which models are taken for broken (every request failing since the last read) and when they are
reloaded: pure tables, no Triton."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.support.models import ADD_CONFIG, add_code, python_model
from triton_operator.protocol.desired import config_pbtxt, load_request_json
from triton_operator.protocol.names import RESTART_PARAMETER, REVISION_PARAMETER
from triton_operator.triton.batching import ModelStatistics
from triton_operator.triton.health import Heal, Healer, HealPolicy, failing_every_request


def stats(requests: int, failures: int) -> ModelStatistics:
    return ModelStatistics(requests=requests, failures=failures)


@pytest.mark.parametrize(
    ("before", "after", "failing"),
    [
        (stats(10, 0), stats(10, 5), {"m": 5}),  # a dead stub: every request since fails
        (stats(10, 0), stats(11, 5), {}),  # one answered: bad inputs, not a dead model
        (stats(10, 0), stats(10, 2), {}),  # too few to tell
        (stats(10, 0), stats(10, 3), {"m": 3}),
        (stats(10, 9), stats(1, 0), {}),  # counters went down: reloaded between the reads
        (None, stats(0, 50), {}),  # one read only: nothing to compare
        (stats(10, 0), stats(10, 0), {}),  # idle
    ],
    ids=["dead-stub", "some-answered", "too-few", "at-threshold", "reloaded", "first-read", "idle"],
)
def test_failing_every_request(before: ModelStatistics | None, after: ModelStatistics, failing: dict[str, int]) -> None:
    assert failing_every_request({"m": before} if before else {}, {"m": after}, failures_in_a_row=3) == failing


def test_the_restart_changes_only_its_own_parameter_at_the_same_revision() -> None:
    model = dataclasses.replace(python_model("m", ADD_CONFIG, add_code()), load_timeout_seconds=90)
    restarted = model.restarted(2)
    kept = ("name", "revision", "files", "composing", "load_timeout_seconds")
    assert [getattr(restarted, field) for field in kept] == [getattr(model, field) for field in kept]
    sent = json.loads(restarted.config_json)
    assert sent["parameters"].pop(RESTART_PARAMETER) == {"string_value": "2"}
    assert sent == json.loads(model.config_json) and sent["parameters"][REVISION_PARAMETER] == {
        "string_value": model.revision
    }
    assert restarted.config_json == load_request_json(restarted.parsed_config())  # printed as every load is
    assert restarted.restarted(3).parsed_config().parameters[RESTART_PARAMETER].string_value == "3"


def test_a_restart_of_a_model_with_its_forms_printed_already_prints_them_again() -> None:
    model = python_model("m", ADD_CONFIG, add_code())
    kept = dataclasses.replace(model, printed_json=model.config_json, printed_pbtxt=model.config_pbtxt)
    restarted = kept.restarted(1)
    assert restarted.config_json == load_request_json(restarted.parsed_config()) != model.config_json
    assert restarted.config_pbtxt == config_pbtxt(restarted.parsed_config()) != model.config_pbtxt


def test_a_model_crashing_on_every_request_is_reloaded_on_a_doubling_backoff() -> None:
    healer = Healer(HealPolicy(failures_in_a_row=3, first_backoff_seconds=30, max_backoff_seconds=100))
    revisions = {"m": "r1", "ok": "r1"}
    reads = iter(range(0, 10_000, 10))

    def read(at: float, failures: int) -> list[Heal]:
        return healer.decide({"m": stats(0, failures), "ok": stats(next(reads), 0)}, revisions, at)

    assert read(0, 0) == []
    assert read(5, 4) == [Heal("m", 1, 4)]
    healer.done(Heal("m", 1, 4))
    assert healer.notes["m"].endswith("reloaded (1 times at this revision)")
    assert read(6, 0) == []  # reloaded: counters start again
    assert read(10, 5) == [] and healer.notes["m"].endswith("reloaded 1 times, the next reload waits 25s")
    assert read(36, 9) == [Heal("m", 2, 4)]  # 30 s after the first
    read(37, 0)
    assert read(90, 5) == []  # 60 s back-off after the second
    assert read(97, 10) == [Heal("m", 3, 5)]
    read(98, 0)
    read(190, 5)
    assert read(198, 10) == [Heal("m", 4, 5)]  # the back-off stops growing at its cap (100 s)
    revisions["m"] = "r2"  # a new revision is a new start, and its notes go
    assert read(199, 0) == [] and "m" not in healer.notes
    assert read(200, 3) == [Heal("m", 1, 3)]


def test_a_model_not_ours_is_never_reloaded() -> None:
    healer = Healer()
    healer.decide({"theirs": stats(1, 0)}, {}, 0)
    assert healer.decide({"theirs": stats(1, 10)}, {}, 1) == []
