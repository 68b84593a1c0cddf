"""The CLI's own YAML reading and writing. Reading: the same data as PyYAML's SafeLoader (YAML 1.1
scalars, anchors, merge keys, explicit tags and their errors), with the line of each field and each key
given twice. Writing manifests.yaml: the same bytes as libyaml's emitter through PyYAML's representer."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.fleet import varied_fleet
from triton_operator.api.findings import Finding
from triton_operator.api.parse import parse_resources
from triton_operator.render.fleet import model_config_maps, plan_fleet, server_objects
from triton_operator.render.manifest_yaml import NotWrittenHere, manifests_yaml
from triton_operator.render.manifests import CONTROL_KEY
from triton_operator.yaml_io import NEVER_FOLD, ManifestDumper, yaml_documents

# YAML that PyYAML's SafeLoader reads in its own ways, or refuses.
TRICKY = {
    "scalars": "a: yes\nb: No\nc: 0x1f\nd: 0o17\ne: 1_000\nf: .inf\ng: -.NaN\nh: ~\ni: 2001-12-14t21:59:43.10-05:00\n"
    "j: 2002-12-14\nk: 1:20\nl: 190:20:30\nm: '12'\nn: !!str 12\no: !!float 1\np: ''\nq: null\nr: 0b101\ns: 012\n",
    "explicit-tags": "a: !!binary aGVsbG8=\nb: !!set {x, y}\nc: !!omap [x: 1, y: 2]\nd: !!pairs [x: 1, x: 2]\n",
    "anchors": "a: &x [1, 2, &y {k: v}]\nb: *x\nc: *y\nd: &s hi\ne: *s\n",
    "merge": "a: &a {x: 1, y: 2}\nb:\n  <<: *a\n  y: 3\nc:\n  <<: [*a, {z: 4, x: 9}]\n  w: 0\n",
    "value-key": "a:\n  =: 1\n  b: 2\n",
    "recursive": "&a [*a]\n",
    "documents": "---\na: 1\n---\n---\n- 1\n- 2\n...\n",
    "scalar-documents": "--- 1\n--- text\n--- !!binary aGk=\n",
    "unicode": "name: \"caf\\xe9 \\U0001F600\"\nkey: 'it''s'\nfolded: >\n  one\n  two\n",
    "unhashable-list-key": "? [a]\n: 1\n",
    "unhashable-map-key": "? {a: 1}\n: 1\n",
    "bad-date": "a: 2024-13-45\n",
    "unknown-tag": "a: !foo 1\n",
    "unknown-tag-on-a-map": "a: !foo {b: 1}\n",
    "plain-value-indicator": "a: =\n",
    "merge-of-a-scalar": "a:\n  <<: 1\n",
}


def read(text: str) -> list[Any] | str:
    """What the CLI reads from a YAML text: its documents' content, or "error"."""
    documents = yaml_documents(text, "f.yaml")
    return "error" if isinstance(documents, Finding) else [document.content for document in documents]


def safe_load_all(text: str) -> list[Any] | str:
    try:
        return list(yaml.load_all(text, Loader=yaml.SafeLoader))
    except (yaml.YAMLError, ValueError):
        return "error"


def test_the_varied_fleet_reads_as_pyyaml_reads_it() -> None:
    documents = varied_fleet(200)
    text = yaml.safe_dump_all(documents, sort_keys=False)
    assert read(text) == documents == safe_load_all(text)


@pytest.mark.parametrize("case", TRICKY)
def test_tricky_yaml_reads_as_pyyaml_reads_it_or_is_refused_as_pyyaml_refuses_it(case: str) -> None:
    text = TRICKY[case]
    assert repr(read(text)) == repr(safe_load_all(text))  # repr: NaN, recursive lists


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.dates(),
        lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
        max_leaves=20,
    ),
    st.sampled_from([None, "'", '"']),
    st.booleans(),
)
def test_any_data_written_in_any_style_reads_as_pyyaml_reads_it(data: Any, style: str | None, flow: bool) -> None:
    text = yaml.safe_dump_all([data, {"again": data}], default_style=style, default_flow_style=flow)
    assert read(text) == safe_load_all(text)


def test_each_field_has_its_line_and_a_key_given_twice_is_named_with_both_lines() -> None:
    text = (
        "kind: x\nspec:\n  config:\n    input:\n    - name: a\n      dims: [1, 2]\n    - &b {name: b}\n"
        "  again: *b\n  merged:\n    <<: *b\n    dims: [3]\n  kind: 1\n  kind: 2\n"
    )
    documents = yaml_documents(text, "f.yaml")
    assert not isinstance(documents, Finding)
    [document] = documents
    assert document.lines == {
        "kind": 1,
        "spec": 2,
        "spec.config": 3,
        "spec.config.input": 4,
        "spec.config.input.0": 5,
        "spec.config.input.0.name": 5,
        "spec.config.input.0.dims": 6,
        "spec.config.input.0.dims.0": 6,
        "spec.config.input.0.dims.1": 6,
        "spec.config.input.1": 7,
        "spec.config.input.1.name": 7,
        "spec.again": 8,
        "spec.merged": 9,
        "spec.merged.<<": 10,
        "spec.merged.dims": 11,
        "spec.merged.dims.0": 11,
        "spec.kind": 12,
    }
    [(line, finding)] = document.repeated
    assert (line, finding.path) == (13, "spec.kind") and "first on line 12" in finding.message
    assert document.content["spec"]["kind"] == 2 and document.content["spec"]["merged"] == {"name": "b", "dims": [3]}


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
