"""What the operator wrote and the watch has not shown it yet: one record, used by every writer (the
children, the revision ConfigMaps, the statuses, the placements), in the manner of KubeRay's
ScaleExpectations. A write is expected under its object and the part written; a reader asks what it
should see, the record until the index catches up; once the index shows the write, or a resync comes,
the expectation is dropped. Nothing else in memory says what was written."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple


class Written(NamedTuple):
    """One part of one object: "object" (a whole child, server-side applied), "status" (the part of the
    status a worker writes) or "placement" (the part the placement task writes)."""

    kind: str
    namespace: str
    name: str
    part: str = "object"


class Expectations:
    """Written -> what was written (a digest, an object, a status: what its writer compares), by part."""

    def __init__(self) -> None:
        self._expected: dict[str, dict[tuple[str, str, str, str], Any]] = {}  # part -> its expectations

    def expect(self, written: Written, what: Any) -> None:
        self._expected.setdefault(written.part, {})[written] = what

    def expected(self, written: Written | tuple[str, str, str, str]) -> Any | None:
        """What was written under this key; a plain tuple of the same four fields is the same key."""
        return self._expected.get(written[3], {}).get(written)

    def part(self, part: str) -> Mapping[tuple[str, str, str, str], Any]:
        """Everything expected of one part, to look up many keys in one pass (a child per model)."""
        return self._expected.setdefault(part, {})

    def any_of(self, part: str) -> bool:
        """Whether anything of one part is expected (a pass with none to read back skips the lookups)."""
        return bool(self._expected.get(part))

    def seen(self, written: Written) -> None:
        """The index shows it (or it was deleted): nothing is expected of it any more."""
        self._expected.get(written.part, {}).pop(written, None)

    def of(self, namespace: str, part: str) -> dict[Written, Any]:
        """What is expected of one part in one namespace."""
        return {Written(*key): what for key, what in self._expected.get(part, {}).items() if key[1] == namespace}

    def keep_only(self, part: str, keep: Callable[[Written, Any], bool]) -> None:
        """Of one part, drop what `keep` says no longer stands (a resync, objects gone)."""
        expected = self._expected.get(part, {})
        self._expected[part] = {key: what for key, what in expected.items() if keep(Written(*key), what)}
