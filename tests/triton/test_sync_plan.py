"""Pure planning without a server: what runs (a refused model keeps its last good version), and
observed + desired -> actions."""

from __future__ import annotations

import pytest

from tests.support.models import ADD_CONFIG
from tests.support.resources import SERVER, model_document
from triton_operator.api.parse import parse_resource
from triton_operator.decide.last_good import desired_models, keep_last_good
from triton_operator.decide.seen import ParsedModel
from triton_operator.protocol.desired import DesiredModel
from triton_operator.render.fleet import RenderedServer, plan_fleet
from triton_operator.triton.client import ModelState
from triton_operator.triton.sync_plan import Action, plan


def desired(name: str, revision: str = "r1", composing: frozenset[str] = frozenset()) -> DesiredModel:
    return DesiredModel(name=name, revision=revision, serialized_config=b"", composing=composing)


def ready(name: str, revision: str = "r1", composing: tuple[str, ...] = ()) -> ModelState:
    return ModelState(name, ready=True, revision=revision, version="1", composing=composing)


def test_missing_model_is_loaded_and_matching_one_left_alone() -> None:
    observed = {"a": ready("a")}
    assert plan(observed, {"a": desired("a"), "b": desired("b")}) == [Action("load", "b")]


def test_new_revision_is_a_reload_never_an_unload() -> None:
    assert plan({"a": ready("a", "old")}, {"a": desired("a", "new")}) == [Action("reload", "a")]


def test_not_ready_model_is_loaded() -> None:
    assert plan({"a": ModelState("a", ready=False, reason="crashed")}, {"a": desired("a")}) == [Action("load", "a")]


def test_only_models_the_operator_put_there_are_unloaded() -> None:
    observed = {"ours": ready("ours"), "theirs": ready("theirs", revision=""), "named": ready("named", revision="")}
    assert plan(observed, {}, managed={"named"}) == [Action("unload", "named"), Action("unload", "ours")]


def test_a_failed_revision_is_not_tried_again_until_it_changes() -> None:
    observed = {"a": ready("a", "old")}
    assert plan(observed, {"a": desired("a", "bad")}, failed={"a": "bad"}) == []
    assert plan(observed, {"a": desired("a", "fixed")}, failed={"a": "bad"}) == [Action("reload", "a")]


def test_ensembles_load_after_their_models_and_unload_first() -> None:
    wanted = {
        "pipeline": desired("pipeline", composing=frozenset({"pre", "net"})),
        "pre": desired("pre"),
        "net": desired("net"),
    }
    assert [a.model for a in plan({}, wanted)] == ["net", "pre", "pipeline"]
    observed = {"old_pipeline": ready("old_pipeline", composing=("step",)), "step": ready("step"), "aaa": ready("aaa")}
    assert plan(observed, {}) == [
        Action("unload", "old_pipeline", unload_dependents=True),
        Action("unload", "aaa"),
        Action("unload", "step"),
    ]


def test_an_ensemble_keeps_step_models_someone_still_wants() -> None:
    observed = {"pipeline": ready("pipeline", composing=("net",)), "net": ready("net")}
    assert plan(observed, {"net": desired("net")}) == [Action("unload", "pipeline", unload_dependents=False)]


def test_plan_of_a_synced_replica_is_empty() -> None:
    wanted = {"a": desired("a"), "b": desired("b", "r2")}
    assert plan({"a": ready("a"), "b": ready("b", "r2")}, wanted, managed={"a", "b"}) == []


@pytest.mark.parametrize(
    ("current", "refused", "runs"),
    [
        ({"a": "a2", "b": "b1"}, set(), {"a": "a2", "b": "b1"}),  # every valid model as rendered now
        ({"b": "b1"}, {"a"}, {"a": "a1", "b": "b1"}),  # a refused model keeps its last good rendering
        ({"b": "b1"}, set(), {"b": "b1"}),  # a model no longer declared goes
        ({"b": "b1"}, {"a", "c"}, {"a": "a1", "b": "b1"}),  # refused and never good: nothing to keep
    ],
    ids=["valid", "refused", "gone", "refused-never-good"],
)
def test_a_refused_model_keeps_its_last_good_version(
    current: dict[str, str], refused: set[str], runs: dict[str, str]
) -> None:
    assert keep_last_good({"a": "a1", "b": "b0"}, current, refused) == runs


@pytest.mark.parametrize(
    ("observed", "wanted", "busy", "actions"),
    [
        # loading at the desired revision: never a second load
        ({}, {"a": desired("a")}, {"a"}, []),
        # the revision moved on while its load runs: the next load waits for that one's end
        ({"a": ready("a", "old")}, {"a": desired("a", "new")}, {"a"}, []),
        # a model no longer declared whose load still runs: unloaded once the load ends
        ({"a": ready("a")}, {}, {"a"}, []),
        # one slow model holds up no other
        (
            {"a": ready("a", "old"), "gone": ready("gone")},
            {"a": desired("a", "new"), "slow": desired("slow")},
            {"slow"},
            [Action("unload", "gone"), Action("reload", "a")],
        ),
        # an ensemble whose step is loading is still planned: its load waits for the step's (Replica)
        (
            {},
            {"net": desired("net"), "pipeline": desired("pipeline", composing=frozenset({"net"}))},
            {"net"},
            [Action("load", "pipeline")],
        ),
    ],
    ids=["same-revision", "revision-moved-on", "undeclared-while-loading", "others-go-on", "ensemble-after-busy-step"],
)
def test_a_model_with_an_action_in_flight_gets_no_other(
    observed: dict[str, ModelState], wanted: dict[str, DesiredModel], busy: set[str], actions: list[Action]
) -> None:
    assert plan(observed, wanted, managed=set(observed), busy=busy) == actions


def _server(*models: ParsedModel) -> RenderedServer:
    server, _ = parse_resource(
        {**SERVER, "spec": {**SERVER["spec"], "modelRepository": {"pvc": {"claimName": "models"}}}}
    )
    [rendered] = plan_fleet([server], [p.model for p in models if p.model is not None]).servers  # type: ignore[list-item]
    return rendered


MODEL_M = ParsedModel.of({**model_document(ADD_CONFIG), "metadata": {"name": "m", "namespace": "default", "uid": "u1"}})
DELETING_M = ParsedModel.of(
    {**MODEL_M.body, "metadata": {**MODEL_M.body["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
)
RENDERED_M = _server(MODEL_M).models[0].desired
LAST_GOOD_M = DesiredModel("m", "0ld", b"")


@pytest.mark.parametrize(
    ("rendered", "models", "refused", "last_good", "desired", "keep", "remembered"),
    [
        (
            _server(MODEL_M),
            [MODEL_M],
            set(),
            {},
            {"m": RENDERED_M},
            set(),
            {"u1": RENDERED_M},
        ),  # valid: as rendered now
        (
            _server(),
            [MODEL_M],
            {MODEL_M.object_id},
            {"u1": LAST_GOOD_M},
            {"m": LAST_GOOD_M},
            set(),
            {"u1": LAST_GOOD_M},
        ),  # refused: its last good rendering
        (_server(), [MODEL_M], {MODEL_M.object_id}, {}, {}, {"m"}, {}),  # refused, never good here: left as it runs
        (_server(), [DELETING_M], {MODEL_M.object_id}, {"u1": LAST_GOOD_M}, {}, set(), {}),  # being deleted: not kept
        (_server(), [], set(), {"u1": LAST_GOOD_M}, {}, set(), {}),  # no longer declared: gone
    ],
    ids=["valid", "refused", "refused-never-good", "deleting", "gone"],
)
def test_what_the_pods_run(
    rendered: RenderedServer,
    models: list[ParsedModel],
    refused: set[str],
    last_good: dict[str, DesiredModel],
    desired: dict[str, DesiredModel],
    keep: set[str],
    remembered: dict[str, DesiredModel],
) -> None:
    """What runs by Triton name, the models left as they run, and the last good renderings (by uid) the next pass
    starts from."""
    assert desired_models(rendered, models, refused, last_good) == (desired, keep, remembered)
