"""The CLI's own YAML reading and writing. Reading: the same data as PyYAML's SafeLoader (YAML 1.1
scalars, anchors, merge keys, explicit tags and their errors), with the line of each field and each key
given twice. (Writing manifests.yaml is tests/speed/test_manifest_yaml.py's.)"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.fleet import varied_fleet
from triton_operator.api.findings import Finding
from triton_operator.yaml_io import yaml_documents

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
