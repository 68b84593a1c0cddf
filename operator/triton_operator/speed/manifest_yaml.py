"""manifests.yaml written in Python, byte for byte what libyaml's emitter writes through PyYAML for the
plain data rendering makes (maps with text keys, lists, text, numbers, booleans, null), block style,
never folded, unicode kept, text of several lines in a literal block.

PyYAML's representer and serializer (Python) plus libyaml's emitter were a large share of `render`
(bench/RESULTS.md, "Measurements behind the design"): here
each distinct scalar is looked at once (a few regular expressions stand for libyaml's character scan)
and the rest is string joins. Anything outside what is written here exactly (a key of several lines or
of more than 128 bytes, a document that is not a map, a literal block whose last lines are empty or
that holds U+2028/U+2029, other types) raises NotWrittenHere, and the caller hands the stream to
libyaml. Equal by tests/speed/test_manifest_yaml.py; its figure: bench/RESULTS.md, "Speed-only code".
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class NotWrittenHere(Exception):
    """Data this writer does not write exactly as libyaml would."""


_STR_TAG = "tag:yaml.org,2002:str"
# Patterns compiled when a stream is written, not at every start-up of the CLI. What libyaml does not
# print as is (YAML 1.1's non-printable characters: text with them is double-quoted), as the few ranges
# they are (their complement takes far longer to compile).
_NOT_PRINTABLE = "[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufeff\ufffe\uffff\U00010000-\U0010ffff]"
_BREAK = "[\n\r\x85\u2028\u2029]"
_SPACE_BREAK = " [\n\r\x85\u2028\u2029]"  # a line's trailing space
_BREAK_SPACE = "[\n\r\x85\u2028\u2029] "  # a line's leading space
_TO_ESCAPE = '[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufeff\ufffe\uffff\U00010000-\U0010ffff"\\\\\u2028\u2029]'
_ESCAPES = {
    "\0": "0",
    "\a": "a",
    "\b": "b",
    "\t": "t",
    "\n": "n",
    "\v": "v",
    "\f": "f",
    "\r": "r",
    "\x1b": "e",
    '"': '"',
    "\\": "\\",
}
_ESCAPES |= {"\x85": "N", "\u2028": "L", "\u2029": "P"}
_FIRST_CHARACTER_INDICATORS = frozenset("#,[]{}&*!|>'\"%@`")
_MAX_SIMPLE_KEY_BYTES = 128


def _escaped(match: re.Match[str]) -> str:
    character = match.group()
    code = _ESCAPES.get(character)
    if code is None:
        number = ord(character)
        code = f"x{number:02X}" if number <= 0xFF else f"u{number:04X}" if number <= 0xFFFF else f"U{number:08X}"
    return "\\" + code


def _plain_allowed(text: str) -> bool:
    """libyaml's block_plain_allowed for text of one line of printable characters."""
    first = text[0]
    if first == " " or text[-1] == " " or first in _FIRST_CHARACTER_INDICATORS or text[:3] in ("---", "..."):
        return False
    if first in "?:-" and text[1:2] in ("", " "):
        return False
    return ": " not in text and not text.endswith(":") and " #" not in text


class _Pads(dict[int, str]):
    """Indentation by its width."""

    def __missing__(self, width: int) -> str:
        self[width] = " " * width
        return self[width]


class _Scalars:
    """How each distinct scalar is written (memoised for the stream): as libyaml chooses its style for
    PyYAML's representation of it, plain where it reads back as the same type, else quoted."""

    def __init__(self) -> None:
        self.resolver = yaml.resolver.Resolver()
        self.representer = yaml.representer.SafeRepresenter()
        self.texts: dict[str, str] = {}
        self.not_printable, self.to_escape = re.compile(_NOT_PRINTABLE), re.compile(_TO_ESCAPE)
        self.any_break, self.space_break, self.break_space = (
            re.compile(_BREAK),
            re.compile(_SPACE_BREAK),
            re.compile(_BREAK_SPACE),
        )
        self.others: dict[tuple[type, Any], str] = {}

    def plain_reads_as(self, text: str, tag: str) -> bool:
        return bool(self.resolver.resolve(yaml.ScalarNode, text, (True, False)) == tag)  # type: ignore[no-untyped-call]  # types-PyYAML leaves Resolver.resolve unannotated

    def text(self, text: str) -> str:
        """A text's scalar after ": " or "- ", or a literal block's header line ("|", "|-", "|2-" ...)
        followed by "\\n" and the block's lines without their indentation ("\\n"-separated)."""
        if text in self.texts:
            return self.texts[text]
        special = self.not_printable.search(text) is not None
        breaks = self.any_break.search(text) is not None
        if "\n" in text:  # the representer asks for a literal block (yaml_io._text)
            literal = not special and text[-1] != " " and self.space_break.search(text) is None
            written = self._literal(text) if literal else self._double_quoted(text)
        elif text and not special and not breaks and _plain_allowed(text) and self.plain_reads_as(text, _STR_TAG):
            written = text
        elif special or self.space_break.search(text) or self.break_space.search(text):
            written = self._double_quoted(text)
        elif breaks:
            written = self._unsupported("single-quoted text of several lines")
        else:
            written = "'" + text.replace("'", "''") + "'"
        self.texts[text] = written
        return written

    def key(self, key: Any) -> str:
        if key.__class__ is not str or len(key.encode()) > _MAX_SIMPLE_KEY_BYTES or self.any_break.search(key):
            self._unsupported(f"key {key!r}")
        return self.text(key)

    def other(self, value: Any) -> str:
        """An int, float, bool or None: PyYAML's text for it, which libyaml writes plain. (Floats are not
        kept: 0.0 and -0.0 are one key of a dict.)"""
        written = self.others.get((value.__class__, value))
        if written is None:
            if value.__class__ not in (int, float, bool, type(None)):
                self._unsupported(f"a {type(value).__name__}")
            node = self.representer.represent_data(value)
            if not (self.plain_reads_as(node.value, node.tag) and _plain_allowed(node.value)):
                self._unsupported(f"{value!r}")
            written = node.value
            if value.__class__ is not float:
                self.others[value.__class__, value] = written
        return written

    def _double_quoted(self, text: str) -> str:
        return '"' + self.to_escape.sub(_escaped, text) + '"'

    def _literal(self, text: str) -> str:
        if "\u2028" in text or "\u2029" in text or text == "\n" or text.endswith("\n\n"):
            self._unsupported("a literal block kept with its last empty lines ('|+') or with U+2028/U+2029")
        header = "|" + ("2" if text[0] in " \n" else "") + ("" if text.endswith("\n") else "-")
        return header + "\n" + text.removesuffix("\n")

    @staticmethod
    def _unsupported(what: str) -> str:
        raise NotWrittenHere(what)


def manifests_yaml(documents: list[dict[str, Any]]) -> str:
    """The documents as one YAML stream, as `yaml.dump_all(documents, Dumper=yaml_io.ManifestDumper,
    sort_keys=False, width=-1, allow_unicode=True)` writes them (tests/cli/test_yaml_io.py compares both)."""
    scalars = _Scalars()
    out: list[str] = []
    write = out.append
    pads = _Pads()

    def scalar(value: Any, indent: int) -> str:
        """`value` after its ": " or "- " up to the end of its last line."""
        if value.__class__ is not str:
            return scalars.other(value) + "\n"
        written = scalars.text(value)
        if written[0] != "|":
            return written + "\n"
        header, _, body = written.partition("\n")
        pad = pads[indent + 2]
        return header + "\n" + "\n".join(pad + line if line else line for line in body.split("\n")) + "\n"

    def mapping(data: dict[Any, Any], indent: int, inline: bool) -> None:
        """A non-empty map whose keys start at `indent`; `inline`: its first key follows a "- "."""
        pad = pads[indent]
        for key, value in data.items():
            write(scalars.key(key) if inline else pad + scalars.key(key))
            inline = False
            kind = value.__class__
            if kind is dict:
                if value:
                    write(":\n")
                    mapping(value, indent + 2, False)
                else:
                    write(": {}\n")
            elif kind is list:
                if value:
                    write(":\n")
                    sequence(value, indent, False)  # a list in a map is not indented further
                else:
                    write(": []\n")
            else:
                write(": " + scalar(value, indent))

    def sequence(items: list[Any], indent: int, inline: bool) -> None:
        """A non-empty list whose dashes start at `indent`; `inline`: its first dash follows a "- "."""
        dash = pads[indent] + "- "
        for item in items:
            write("- " if inline else dash)
            inline = False
            kind = item.__class__
            if kind is dict:
                if item:
                    mapping(item, indent + 2, True)
                else:
                    write("{}\n")
            elif kind is list:
                if item:
                    sequence(item, indent + 2, True)
                else:
                    write("[]\n")
            else:
                write(scalar(item, indent))

    for number, document in enumerate(documents):
        if document.__class__ is not dict or not document:
            raise NotWrittenHere("a document that is not a map with keys")
        if number:
            write("---\n")
        mapping(document, 0, False)
    return "".join(out)
