"""render/'s manifests.yaml writer (speed/manifest_yaml.py) against what it stands for: libyaml's bytes through
PyYAML's representer, for the data rendering makes, and a refusal (NotWrittenHere) for anything else."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.fleet import varied_fleet
from triton_operator.api.parse import parse_resources
from triton_operator.render.fleet import model_config_maps, plan_fleet, server_objects
from triton_operator.render.manifests import CONTROL_KEY
from triton_operator.speed.manifest_yaml import NotWrittenHere, manifests_yaml
from triton_operator.yaml_io import NEVER_FOLD, ManifestDumper

# The writer of manifests.yaml: libyaml's bytes, through PyYAML's representer, for the data rendering makes.
NASTY_TEXT = [
    "",
    " ",
    "a ",
    " a",
    "a: b",
    "a:",
    ":a",
    "- a",
    "-a",
    "-",
    "? a",
    "?a",
    "#a",
    "a #b",
    "a#b",
    "yes",
    "No",
    "on",
    "null",
    "~",
    "0x1",
    "0o17",
    "1_000",
    "1:20",
    ".inf",
    "-.NaN",
    "2001-12-14",
    "=",
    "<<",
    "---",
    "...",
    "--- a",
    "'quoted'",
    '"quoted"',
    "it's",
    "a, b",
    "[a]",
    "{a}",
    "&a",
    "*a",
    "!a",
    "|a",
    ">a",
    "%a",
    "@a",
    "`a",
    "tab\there",
    "bell\a",
    "nul\0",
    "del\x7f",
    "nel\x85",
    "nbsp\xa0",
    "bom\ufeff",
    "caf\xe9",
    "\U0001f600",
    "\ud7ff\ue000\ufffd\ufffe",
    "back\\slash",
    "cr\rlf",
    "ls\u2028",
    "ps\u2029 x",
    "two\nlines",
    "two\nlines\n",
    "\nleading break",
    " leading space\nx",
    "trailing space \nx",
    "x\ntrailing space ",
    "x\n y\n",
    "x\n\ty",
    "many\n\n\nbreaks\n",
    "x" * 200,
    "é" * 70,
]
scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.sampled_from(NASTY_TEXT) | st.text()
plain_data = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(NASTY_TEXT) | st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=25,
)


def rendered_objects(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What `render` writes to manifests.yaml for these documents."""
    config_maps = {("default", d["metadata"]["name"]): d for d in documents if d["kind"] == "ConfigMap"}
    servers, models, found = parse_resources([d for d in documents if d["kind"] != "ConfigMap"])
    fleet = plan_fleet(servers, models, config_maps, earlier=found)
    return [
        obj
        for rendered in fleet.servers
        for obj in server_objects(rendered, {CONTROL_KEY: "key"}) + model_config_maps(rendered.models)
    ]


def libyaml_stream(documents: list[Any]) -> str:
    return yaml.dump_all(documents, Dumper=ManifestDumper, sort_keys=False, width=NEVER_FOLD, allow_unicode=True)


def test_the_varied_fleets_manifests_are_libyamls_bytes_and_read_back_as_written() -> None:
    objects = rendered_objects(varied_fleet(200))
    text = manifests_yaml(objects)
    assert text == libyaml_stream(objects)
    assert list(yaml.load_all(text, Loader=yaml.CSafeLoader)) == objects


@pytest.mark.parametrize("text", NASTY_TEXT)
def test_nasty_text_as_a_value_an_item_and_a_key_is_written_as_libyaml_writes_it(text: str) -> None:
    values = [{"key": text, "list": [text, {"in": text}], "nested": {"deeper": [[text]]}}, {"again": text}]
    simple_key = len(text.encode()) <= 128 and not any(character in text for character in "\n\r\x85\u2028\u2029")
    for documents in [values, [{text: {text: 1}}]] if simple_key else [values]:  # a key of several lines: libyaml's
        try:
            written = manifests_yaml(documents)
        except NotWrittenHere:
            assert text == "ls\u2028"  # single-quoted over several lines: libyaml's
            continue
        assert written == libyaml_stream(documents)
        assert list(yaml.load_all(written, Loader=yaml.SafeLoader)) == documents


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.dictionaries(st.sampled_from(NASTY_TEXT) | st.text(max_size=8), plain_data, min_size=1, max_size=5),
        min_size=1,
        max_size=3,
    )
)
def test_any_plain_data_is_written_as_libyaml_writes_it_or_left_to_libyaml(documents: list[dict[str, Any]]) -> None:
    try:
        written = manifests_yaml(documents)
    except NotWrittenHere:
        return
    assert written == libyaml_stream(documents)


def test_what_is_not_written_here_is_said() -> None:
    for documents in (
        [{"a\nb": 1}],
        [{"k" * 129: 1}],
        [["a list"]],
        [{}],
        [{"a": b"bytes"}],
        [{"a": "ends in empty lines\n\n"}],
        [{1: "int key"}],
    ):
        with pytest.raises(NotWrittenHere):
            manifests_yaml(documents)  # type: ignore[arg-type]
