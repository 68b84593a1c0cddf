"""Hypothesis strategies for bad input: CR documents with one value, anywhere in them, replaced by
something odd (a wrong type, a value out of range, a flag the operator owns)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["1e30", "lots", "-1", "7Ei", "8Ei", "", "TYPE_FLOAT", "--model-control-mode=poll"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


def _replaced(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = dict(document) if isinstance(document, dict) else list(document)
    copy[path[0]] = _replaced(document[path[0]], path[1:], value)
    return copy


def mutated(documents: list[Any]) -> st.SearchStrategy[list[Any]]:
    """The documents with one of their values (or a whole document) replaced by an odd value."""
    places = [(index, path) for index, document in enumerate(documents) for path in _paths(document)]

    def mutate(place: tuple[int, tuple[Any, ...]], value: Any) -> list[Any]:
        index, path = place
        return [
            _replaced(document, path, value) if number == index else document
            for number, document in enumerate(documents)
        ]

    return st.builds(mutate, st.sampled_from(places), ODD_VALUES)
