"""Our quantity parser against the kubernetes client's, which it replaced to keep that package out of
the CLI's start-up: the same value for every quantity of the API server's grammar, and a refusal
for what the API server refuses."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity as kubernetes_parse_quantity

from triton_operator.api.types import QUANTITY_PATTERN, parse_quantity

CASES = [
    "0",
    "1",
    "-1",
    "+1",
    ".5",
    "5.",
    "1.5",
    "500m",
    "250u",
    "7n",
    "2k",
    "1M",
    "3G",
    "4T",
    "5P",
    "6E",
    "1Ki",
    "256Mi",
    "1.5Gi",
    "2Ti",
    "3Pi",
    "7Ei",
    "1e3",
    "1E3",
    "1e+3",
    "1.5e-3",
    "-2.5E+2",
    "999999Ti",
    "12345678901234567890",
    "0.000000001",
    "1e-9",
]


@pytest.mark.parametrize("text", CASES)
def test_same_value_as_the_kubernetes_client(text: str) -> None:
    assert parse_quantity(text) == kubernetes_parse_quantity(text)


def test_integers_are_their_own_value() -> None:
    assert parse_quantity(268435456) == Decimal(268435456) and parse_quantity(-3) == Decimal(-3)


@settings(max_examples=300, deadline=None)
@given(st.from_regex(QUANTITY_PATTERN, fullmatch=True))
def test_every_quantity_of_the_grammar_has_the_kubernetes_value(text: str) -> None:
    try:
        expected = kubernetes_parse_quantity(text)
    except ValueError:  # an exponent with a fraction (1e2.5) fits the pattern but is no number
        with pytest.raises(ValueError):
            parse_quantity(text)
        return
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "1ki", "1e", "0x10", "1Mi ", "5\n", "1.5.5", "Mi", "1 Gi", "1iB"])
def test_what_the_api_server_refuses_is_refused(text: str) -> None:
    assert not re.fullmatch(QUANTITY_PATTERN, text)
    with pytest.raises(ValueError):
        parse_quantity(text)


@pytest.mark.parametrize("text", ["NaN", "Infinity", " 5", "1_000", "1e-3Mi"])
def test_what_only_the_kubernetes_client_took_is_refused(text: str) -> None:
    kubernetes_parse_quantity(text)  # the client takes it; the API server does not
    assert not re.fullmatch(QUANTITY_PATTERN, text)
    with pytest.raises(ValueError):
        parse_quantity(text)
