"""YAML in and out: CR files read with the line of every field and every repeated key, and YAML
written plain (no anchors), with text of several lines in blocks, through libyaml where it can be.

Apart from sources.py (what the documents mean) and the CLI (which files it writes) because both read
and write YAML alike, and the tag of each distinct scalar is worked out once for either way.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import yaml

from .api.findings import Finding


class TagsResolvedOnce:
    """A loader's or dumper's resolver that works out the tag of each distinct scalar once.

    libyaml's parser and emitter ask PyYAML's resolver (Python, regular expressions) for the tag of
    every scalar, twice a scalar when writing: for a fleet's files, the same keys and values again
    and again. The safe resolver's answer depends only on the node's kind, its text and how it was
    written (no path resolvers are added here), so each answer is kept for the rest of the stream."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._scalar_tags: dict[tuple[str, Any], str] = {}

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: Any) -> str:
        if kind is not yaml.ScalarNode:  # a map or a list: no text to match, nothing to keep
            return super().resolve(kind, value, implicit)  # type: ignore[misc,no-any-return]  # a mixin: resolve is the (unannotated) PyYAML resolver's it is mixed into
        key = (value, implicit)
        tag = self._scalar_tags.get(key)
        if tag is None:
            tag = self._scalar_tags[key] = super().resolve(kind, value, implicit)  # type: ignore[misc]  # a mixin: resolve is the PyYAML resolver's it is mixed into
        return tag


class _Loader(TagsResolvedOnce, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]  # a base chosen at run time: libyaml's where PyYAML has it
    pass


@dataclass
class Document:
    """One YAML document: what it holds, the line of each field path in it ("spec.config.input.0.dims"),
    and the keys it repeats."""

    content: Any
    lines: dict[str, int]
    repeated: list[tuple[int, Finding]]  # each key given again, with its line


_MAP, _SEQ = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_MERGE_KEYS = ("tag:yaml.org,2002:merge", "tag:yaml.org,2002:value")  # '<<' and '=', PyYAML's to resolve
_SHAREABLE = (str, int, float, type(None), bytes, datetime.date)  # what a safe scalar constructs: immutable
_UNBUILT = object()
_ScalarNode = yaml.ScalarNode  # checked for every node: one lookup less


def _read_document(loader: Any, root: yaml.Node, scalars: dict[tuple[str, str], Any]) -> Document:
    """A document's content and its lines in one pass over the nodes libyaml composed: plain maps and
    lists built here, each distinct scalar constructed once by PyYAML (`scalars` keeps them for the
    stream: the same tag and text construct the same immutable value). A collection with a tag of its
    own (!!set, !!omap) or merge keys is PyYAML's to construct, after its lines are recorded.

    Records the line of every key and list item, and every key given twice in one map (kubectl and
    the API server refuse those; PyYAML keeps the last silently)."""
    document = Document(None, {}, [])
    built: dict[int, Any] = {}  # id of a collection node -> its value (an alias builds nothing again)

    def scalar(node: yaml.ScalarNode) -> Any:
        value = scalars.get((node.tag, node.value), _UNBUILT)
        if value is _UNBUILT:
            value = loader.construct_object(node, deep=True)
            if isinstance(value, _SHAREABLE):
                scalars[node.tag, node.value] = value
        return value

    def build(node: yaml.Node, path: str, into: Document) -> Any:
        """The value of a collection node (a scalar's is scalar()'s, inlined below as most nodes are scalars)."""
        data = built.get(id(node), _UNBUILT)
        if data is not _UNBUILT:
            return data
        lines = into.lines
        if node.__class__ is yaml.SequenceNode:
            data = built[id(node)] = []
            for index, item in enumerate(node.value):
                field = f"{path}.{index}"
                lines.setdefault(field, item.start_mark.line + 1)
                if item.__class__ is _ScalarNode:
                    value = scalars.get((item.tag, item.value), _UNBUILT)
                    data.append(scalar(item) if value is _UNBUILT else value)
                else:
                    data.append(build(item, field, into))
            own = node.tag == _SEQ
        else:
            data = built[id(node)] = {}
            first: dict[tuple[str, str], int] = {}
            own = node.tag == _MAP
            for key_node, value_node in node.value:
                if key_node.__class__ is not _ScalarNode:  # a map or a list: no key for a dict, as PyYAML says
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark, "found unhashable key", key_node.start_mark
                    )
                line = key_node.start_mark.line + 1
                field = f"{path}.{key_node.value}" if path else key_node.value
                into_value = into
                tagged_key = (key_node.tag, key_node.value)
                if tagged_key in first:
                    message = (
                        f"'{key_node.value}' is given twice in one map (first on line {first[tagged_key]}): kubectl "
                        "and the API server refuse that; keep one"
                    )
                    into.repeated.append((line, Finding("error", field, message)))
                    into_value = Document(None, {}, [])  # the last value kept, as PyYAML does, its lines not
                else:
                    first[tagged_key] = line
                    lines.setdefault(field, line)
                if value_node.__class__ is _ScalarNode:
                    value = scalars.get((value_node.tag, value_node.value), _UNBUILT)
                    if value is _UNBUILT:
                        value = scalar(value_node)
                else:
                    value = build(value_node, field, into_value)
                if key_node.tag in _MERGE_KEYS:
                    own = False
                else:
                    key = scalars.get(tagged_key, _UNBUILT)
                    data[scalar(key_node) if key is _UNBUILT else key] = value
        if not own:
            data = built[id(node)] = loader.construct_object(node, deep=True)
        return data

    if root.__class__ is _ScalarNode:
        document.content = scalar(root)
    elif root is not None:
        document.content = build(root, "", document)
    loader.constructed_objects, loader.recursive_objects = {}, {}
    return document


def yaml_documents(text: str, file: str) -> list[Document] | Finding:
    """Every document of a (multi-document) YAML text with its lines, or the YAML error with its line."""
    loader = _Loader(text)
    documents: list[Document] = []
    try:
        scalars: dict[tuple[str, str], Any] = {}
        while loader.check_node():
            documents.append(_read_document(loader, loader.get_node(), scalars))
        return documents
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = f"{file}:{mark.line + 1}" if mark else file
        problem = " ".join(part for part in (error.context, error.problem) if part)
        return Finding("error", "", f"not valid YAML: {problem}", file=line)
    except (yaml.YAMLError, ValueError, RecursionError) as error:  # e.g. a date like 2024-13-45
        return Finding("error", "", f"not valid YAML: {error}", file=file)
    finally:
        loader.dispose()


class PlainDumper(yaml.SafeDumper):
    """Writes shared sub-objects out in full: anchors and aliases confuse people and some tools."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class _TextDumper(PlainDumper):
    """Also writes text of several lines (config.pbtxt, model.py) as it reads, in a block (`key: |`):
    the files people open to see what runs."""


def _text(dumper: yaml.representer.SafeRepresenter, text: str) -> yaml.ScalarNode:
    """PyYAML falls back to a quoted string where a block cannot hold the text (trailing spaces, tabs)."""
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_TextDumper.add_representer(str, _text)


class ManifestDumper(TagsResolvedOnce, yaml.CSafeDumper):
    """Writes what _TextDumper writes, through libyaml's emitter (PyYAML's pure-Python one would be most
    of a render of thousands of models), and never folds a line: a value stays on the line of its key."""

    ignore_aliases = PlainDumper.ignore_aliases


ManifestDumper.add_representer(str, _text)
NEVER_FOLD = -1  # libyaml's width for "no limit"


def dump_yaml(document: Any, dumper: type[PlainDumper] = _TextDumper) -> str:
    return yaml.dump(document, Dumper=dumper, sort_keys=False, width=120, allow_unicode=True)
