"""Every wait of a benchmark is bounded: a bench that hangs gives no figure and holds the machine, so each
wait fails at a bound with a message. Read from bench/*.py with ast:

- a `while` loop that blocks (sleeps, waits, joins, reads a line or takes from a queue), and any `while True`,
  keeps a deadline in sight (a name with "deadline" in its test or body). A loop that runs until its owner
  sets an Event (`while not x.is_set()`) is a worker, not a wait: its owner's join is the wait;
- `.wait()`, `.join()` and `.communicate()` name a timeout, and so do `asyncio.wait` and `subprocess.run`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

BLOCKING = {"sleep", "wait", "join", "readline", "communicate"}
TIMED = {"wait", "join", "communicate"}  # unbounded unless given a timeout


def _name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _module_call(call: ast.Call, module: str, name: str) -> bool:
    func = call.func
    return isinstance(func, ast.Attribute) and func.attr == name and ast.unparse(func.value) == module


def _blocks(call: ast.Call) -> bool:
    """A call that waits for something: a sleep, a wait, a join, a line read, or a queue's get with a timeout."""
    timeout = any(keyword.arg == "timeout" for keyword in call.keywords)
    return _name(call) in BLOCKING or (_name(call) == "get" and timeout)


def _deadline_in_sight(loop: ast.While) -> bool:
    return any(
        "deadline" in (node.id if isinstance(node, ast.Name) else node.attr)
        for node in ast.walk(loop)
        if isinstance(node, ast.Name | ast.Attribute)
    )


def _owner_stops_it(loop: ast.While) -> bool:
    test = loop.test
    return (
        isinstance(test, ast.UnaryOp)
        and isinstance(test.op, ast.Not)
        and isinstance(test.operand, ast.Call)
        and _name(test.operand) == "is_set"
    )


def unbounded_waits(source: str) -> list[str]:
    """Each wait of `source` with no bound, as `line: what`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.While):
            forever = isinstance(node.test, ast.Constant) and node.test.value is True
            blocking = any(isinstance(call, ast.Call) and _blocks(call) for call in ast.walk(node))
            if (forever or blocking) and not _owner_stops_it(node) and not _deadline_in_sight(node):
                found.append(f"{node.lineno}: a polling `while {ast.unparse(node.test)}` with no deadline")
        elif isinstance(node, ast.Call):
            keywords = {keyword.arg for keyword in node.keywords}
            if _module_call(node, "asyncio", "wait") or _module_call(node, "subprocess", "run"):
                if "timeout" not in keywords:
                    found.append(f"{node.lineno}: {ast.unparse(node.func)}(...) with no timeout")
            elif _name(node) in TIMED and not node.args and "timeout" not in keywords:
                found.append(f"{node.lineno}: {ast.unparse(node)} with no timeout")
    return found


BENCHES = sorted((ROOT / "bench").glob("*.py"))


@pytest.mark.parametrize("path", BENCHES, ids=[path.name for path in BENCHES])
def test_every_wait_of_a_bench_is_bounded(path: Path) -> None:
    assert unbounded_waits(path.read_text()) == [], f"{path.relative_to(ROOT)}: give each wait a bound"


UNBOUNDED = {
    "a poll of a condition": "while count() < 3:\n    time.sleep(1)",
    "an async poll": "async def f():\n    while not done():\n        await asyncio.sleep(1)",
    "while True": "while True:\n    if done():\n        break",
    "a queue read until a line": "while text not in lines.get(timeout=300):\n    pass",
    "an Event waited for": "async def f():\n    await asyncio.Event().wait()",
    "a process waited for": "process.wait()",
    "a thread joined": "thread.join()",
    "a subprocess run": "subprocess.run(['true'], check=True)",
    "asyncio.wait": "async def f():\n    await asyncio.wait(tasks)",
}
BOUNDED = {
    "a poll with a deadline": (
        "deadline = time.monotonic() + 60\nwhile count() < 3:\n"
        "    if time.monotonic() > deadline:\n        raise TimeoutError('count')\n    time.sleep(1)"
    ),
    "a worker its owner stops": "while not stop.is_set():\n    work()\n    stop.wait(0.01)",
    "a process waited for up to a minute": "process.wait(timeout=60)",
    "a thread joined up to a minute": "thread.join(60)",
    "a subprocess run with a timeout": "subprocess.run(['true'], check=True, timeout=60)",
    "a helper's wait with its own bound": "async def f():\n    await api.wait('ready', check, timeout=60)",
    "a loop that does not wait": "while pending:\n    pending.pop()",
}


@pytest.mark.parametrize("source", UNBOUNDED.values(), ids=UNBOUNDED)
def test_an_unbounded_wait_is_found(source: str) -> None:
    assert len(unbounded_waits(source)) == 1


@pytest.mark.parametrize("source", BOUNDED.values(), ids=BOUNDED)
def test_a_bounded_wait_passes(source: str) -> None:
    assert unbounded_waits(source) == []
