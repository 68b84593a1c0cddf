"""The content of the ConfigMaps that models name for their files.

The ConfigMap index keeps the content of a ConfigMap only if a TritonModel named it when it was
indexed (state.config_map_view): the others, which may be anything of anyone's, cost a few bytes
each. A ConfigMap made before the model that names it (or indexed before that model, in the
operator's first listing) is read from the API server when a pass needs it, once per resourceVersion;
its next change is indexed whole, as a model names it by then.
"""

from __future__ import annotations

from typing import Any

from ..api import KubernetesApi
from ..watch.indexes import Indexes, config_map_view, unread

ConfigMapKey = tuple[str, str]  # (namespace, name)


class ConfigMapFiles:
    """Shared by every worker, so a ConfigMap that several servers' models name is read once."""

    def __init__(self, api: KubernetesApi):
        self.api = api
        self.read: dict[ConfigMapKey, tuple[str | None, dict[str, Any]]] = {}  # key -> (indexed resourceVersion, view)

    async def of(self, indexes: Indexes, namespace: str, names: set[str]) -> dict[ConfigMapKey, dict[str, Any]]:
        """The content of the named ConfigMaps that exist."""
        found: dict[ConfigMapKey, dict[str, Any]] = {}
        for name in sorted(names):
            key = (namespace, name)
            view = indexes.config_map(namespace, name)
            if view is None or not unread(view):
                self.read.pop(key, None)
                if view is not None:
                    found[key] = view
                continue
            kept = self.read.get(key)
            if kept is None or kept[0] != view["resourceVersion"]:
                body = await self.api.get("ConfigMap", namespace, name)
                if body is None:  # deleted since it was indexed
                    continue
                self._forget_unnamed(indexes)
                kept = self.read[key] = (view["resourceVersion"], config_map_view(body, named=True))
            found[key] = kept[1]
        return found

    def _forget_unnamed(self, indexes: Indexes) -> None:
        """What was read for models that no longer name it goes: what is kept is bounded by what models name."""
        self.read = {key: kept for key, kept in self.read.items() if key in indexes.models_by_config_map}
