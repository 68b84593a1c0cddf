"""The rule for models that kill their server, as a table: deaths seen with loads under way -> what is held back."""

from __future__ import annotations

import pytest

from triton_operator.decide.crashes import CrashRecord, ServerDeath, count_deaths, held_back, termination

SEGV = "signal 11 (SIGSEGV), exit code 139"


def death(pod: str, *loading: str, ended: str = SEGV) -> ServerDeath:
    return ServerDeath(pod, ended, frozenset(loading))


@pytest.mark.parametrize(
    ("records", "deaths", "revisions", "held"),
    [
        ({}, [death("a", "bad")], {"bad": "r1", "good": "r2"}, []),  # once may be bad luck
        ({}, [death("a", "bad"), death("a", "bad")], {"bad": "r1"}, ["bad"]),  # twice: held back
        ({}, [death("a", "bad"), death("b", "bad")], {"bad": "r1"}, ["bad"]),  # on two pods of the server
        ({}, [death("a", "bad", "good"), death("a", "bad")], {"bad": "r1", "good": "r2"}, ["bad"]),  # only twice
        ({}, [death("a"), death("a")], {"bad": "r1"}, []),  # nothing loading: nobody's fault
        ({}, [death("a", "gone"), death("a", "gone")], {"bad": "r1"}, []),  # not declared
        ({"bad": CrashRecord("r1", ("pod a: x",))}, [death("a", "bad")], {"bad": "r1"}, ["bad"]),  # remembered
        ({"bad": CrashRecord("r0", ("pod a: x", "pod a: y"))}, [], {"bad": "r1"}, []),  # new revision: tried again
        ({"bad": CrashRecord("r0", ("pod a: x",))}, [death("a", "bad")], {"bad": "r1"}, []),  # count starts over
    ],
)
def test_a_model_loading_at_two_deaths_of_its_server_is_held_back_until_its_revision_changes(
    records: dict[str, CrashRecord], deaths: list[ServerDeath], revisions: dict[str, str], held: list[str]
) -> None:
    assert sorted(held_back(count_deaths(records, deaths, revisions), "triton")) == held


def test_why_names_the_server_the_pods_and_how_they_ended() -> None:
    records = count_deaths({}, [death("triton-a", "bad"), death("triton-b", "bad", ended="exit code 1")], {"bad": "r"})
    why = held_back(records, "triton")["bad"]
    assert "TritonServer triton's tritonserver died 2 times while this model loaded" in why
    assert f"pod triton-a: {SEGV}; pod triton-b: exit code 1" in why and "until its config or files change" in why


@pytest.mark.parametrize(
    ("container", "ended"),
    [
        ({"lastState": {"terminated": {"exitCode": 139, "reason": "Error"}}}, f"{SEGV} (Error)"),
        ({"lastState": {"terminated": {"exitCode": 0, "signal": 9}}}, "signal 9 (SIGKILL)"),
        ({"lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}, "exit code 1 (Error)"),
        (
            {"lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}},
            "signal 9 (SIGKILL), exit code 137 (OOMKilled)",
        ),
        ({"restartCount": 0}, ""),
    ],
)
def test_how_a_container_ended_is_read_from_its_last_state(container: dict[str, object], ended: str) -> None:
    assert termination(container) == ended
