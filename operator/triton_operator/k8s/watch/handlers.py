"""The kopf handlers: indexes that mirror the cluster, and events that wake a server's worker and keep
the models' finalizer.

Handlers stay thin: they keep the indexes, decide which worker a change concerns, and let the
worker (worker.py) and the finalizer (finalizer.py) do the work. Every handler is an index or an
event handler, for which kopf writes nothing on the objects (no finalizer, no annotations). Every
handler is `async def`: kopf runs a plain `def` handler in a thread, where a worker can be neither
started nor woken, and a thread hop costs more than an index handler's own work (bench/RESULTS.md). `register`
puts everything into one registry, so a test runs the operator in-process with
`kopf.operator(registry=..., stop_flag=...)`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import kopf

from ...api.types import GROUP, VERSION
from ...decide.seen import ServerKey
from ...speed import index_gate
from ..api import KubernetesApi
from ..placer import Placer
from ..pods.reachability import Reachability, Retries
from ..process.settings import Settings
from ..server.ownership import controller_uid
from ..server.workers import Workers
from .finalizer import Finalizer
from .indexes import (
    INSTANCE_LABEL,
    MANAGED_BY,
    Indexes,
    config_map_view,
    custom_resource,
    digest,
    model_config_map,
    model_name_of,
    model_server_keys,
    pod_view,
    section,
    spec_fingerprint,
    touch_fingerprint,
    touched,
)

logger = logging.getLogger(__name__)

LoginFn = Callable[..., Awaitable[kopf.ConnectionInfo]]
INDEX_NAMES = (
    "servers",
    "models",
    "pods",
    "config_maps",
    "models_by_config_map",
    "selector_models",
    "replica_sets",
    "deployments",
)


async def default_login(**kwargs: Any) -> kopf.ConnectionInfo:
    """kopf's own ways: in a pod its service account (first: it needs no `kubernetes` client, which costs
    memory); elsewhere the kubernetes client's config (kubeconfig with exec plugins), else a plain kubeconfig."""
    info = (
        kopf.login_with_service_account(**kwargs)
        or kopf.login_via_client(**kwargs)
        or kopf.login_with_kubeconfig(**kwargs)
    )
    if info is None:
        raise kopf.PermanentError("no Kubernetes credentials: no kubeconfig and no service account")
    return info


def configure_kopf(settings: kopf.OperatorSettings, ours: Settings, reachability: Reachability) -> None:
    """Nothing of kopf's in status (ours is typed). kopf's own finalizer name stays its default: it is
    never added (no handler needs it), and kopf takes the finalizer of that name away from every object
    it sees (so it must not be ours, finalizer.FINALIZER). Watches are bounded at both ends: kopf sets
    none, and a stream that stays open delivering nothing would leave the indexes stale without a word.
    A failed request is retried without end (reachability.py): kopf's own retries run out within a
    minute, and a watch that gives up ends the operator."""
    settings.posting.level = logging.WARNING
    settings.networking.error_backoffs = Retries(reachability)
    settings.watching.server_timeout = ours.watch_server_timeout_seconds
    settings.watching.client_timeout = ours.watch_client_timeout_seconds
    settings.watching.connect_timeout = ours.watch_connect_timeout_seconds


@dataclass
class Operator:
    """What the handlers share: the API client, the workers, and what each object looked like last."""

    settings: Settings
    api: KubernetesApi = field(default_factory=KubernetesApi)
    workers: Workers = field(init=False)
    finalizer: Finalizer = field(init=False)
    placer: Placer = field(init=False)
    reachability: Reachability = field(init=False)
    fingerprints: dict[str, str] = field(default_factory=dict)  # uid -> fingerprint of the last change seen
    server_of: dict[str, list[ServerKey]] = field(default_factory=dict)  # model uid -> the servers it was on
    touches: dict[str, str] = field(default_factory=dict)  # model uid -> its touch fingerprint last seen

    def __post_init__(self) -> None:
        self.workers = Workers(self.api, self.settings)
        self.finalizer = Finalizer(self.api, self.workers, self.settings)
        self.placer = Placer(self.api, self.workers, self.settings)
        self.reachability = Reachability(probe=lambda: self.api.request("GET", "/version"))

    def changed(
        self, body: kopf.Body, fingerprint: str, event_type: str | None, keys: list[ServerKey], indexes: dict[str, Any]
    ) -> None:
        """Wake the workers of `keys` if the object changed in a way that matters (status writes do not)."""
        if self.workers.indexes is None:
            self.workers.indexes = Indexes(**{name: indexes[name] for name in INDEX_NAMES})
        uid = body.get("metadata", {}).get("uid", "")
        if event_type == "DELETED":
            self.fingerprints.pop(uid, None)
        elif self.fingerprints.get(uid) == fingerprint:
            return
        else:
            self.fingerprints[uid] = fingerprint
        for key in keys:
            self.workers.wake(key)

    def model_touched(self, body: kopf.Body, event_type: str | None) -> bool:
        """Whether this event saved the TritonModel again (its labels or annotations changed)."""
        uid = body.get("metadata", {}).get("uid", "")
        before, after = self.touches.get(uid), touch_fingerprint(body)
        if event_type == "DELETED":
            self.touches.pop(uid, None)
        else:
            self.touches[uid] = after
        return touched(event_type, before, after)

    def retry_failed(self, models: dict[ServerKey, set[str]]) -> None:
        """Models saved again: their servers' workers load their failed revisions once more."""
        for key, names in models.items():
            self.workers.get(key).retry_failed(names)


def _namespaced(namespace: str | None) -> str:
    """kopf passes None for a cluster-wide object; every resource these handlers watch is namespaced."""
    assert namespace is not None, "a namespaced resource"
    return namespace


def _indexes(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {name: kwargs[name] for name in INDEX_NAMES}


def register(registry: kopf.OperatorRegistry, settings: Settings, login: LoginFn = default_login) -> Operator:
    """Register every handler into `registry`; returns the shared state (tests look into it)."""
    index_gate.install()
    operator = Operator(settings)
    models_resource = (GROUP, VERSION, "tritonmodels")
    servers_resource = (GROUP, VERSION, "tritonservers")

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure_kopf(settings, operator.settings, operator.reachability)

    @kopf.on.login(registry=registry)
    async def authenticate(**kwargs: Any) -> kopf.ConnectionInfo:
        relogin = functools.partial(login, **kwargs)
        info = await relogin()
        operator.api.authenticate(info, relogin)
        return info

    @kopf.on.cleanup(registry=registry)
    async def stop(**_: Any) -> None:
        await operator.reachability.stop()
        await operator.finalizer.stop()
        await operator.placer.stop()
        await operator.workers.stop()
        await operator.api.close()

    @kopf.index(*servers_resource, id="servers", registry=registry)
    async def servers(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[ServerKey, dict[str, Any]]:
        return {(_namespaced(namespace), name): custom_resource(body)}

    @kopf.index(*models_resource, id="models", registry=registry)
    async def models(body: kopf.Body, **_: Any) -> dict[ServerKey, dict[str, Any]]:
        view = custom_resource(body)
        return {key: view for key in model_server_keys(body)}

    @kopf.index(*models_resource, id="selector_models", registry=registry)
    async def selector_models(namespace: str | None, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]] | None:
        return {_namespaced(namespace): custom_resource(body)} if "serverSelector" in section(body, "spec") else None

    @kopf.index(*models_resource, id="models_by_config_map", registry=registry)
    async def models_by_config_map(
        namespace: str | None, body: kopf.Body, **_: Any
    ) -> dict[tuple[str, str], tuple[ServerKey, ...]] | None:
        name = model_config_map(body)
        return {(_namespaced(namespace), name): tuple(model_server_keys(body))} if name else None

    @kopf.index("v1", "pods", labels=MANAGED_BY, id="pods", registry=registry)
    async def pods(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict[ServerKey, Any]:
        return {(_namespaced(namespace), labels.get(INSTANCE_LABEL, "")): pod_view(body)}

    # A pod's owner chain, which makes it the server's (Indexes.pods_of): each Deployment and ReplicaSet
    # labelled as the operator's, by uid, with its controller's uid.
    @kopf.index("apps", "v1", "deployments", labels=MANAGED_BY, id="deployments", registry=registry)
    @kopf.index("apps", "v1", "replicasets", labels=MANAGED_BY, id="replica_sets", registry=registry)
    async def owners(namespace: str | None, uid: str, body: kopf.Body, **_: Any) -> dict[tuple[str, str], str]:
        return {(_namespaced(namespace), uid): controller_uid(body) or ""}

    @kopf.index("v1", "configmaps", id="config_maps", registry=registry)
    async def config_maps(
        namespace: str | None, name: str, body: kopf.Body, **kwargs: Any
    ) -> dict[tuple[str, str], dict[str, Any]]:
        key = (_namespaced(namespace), name)
        return {key: config_map_view(body, named=key in kwargs["models_by_config_map"])}

    @kopf.on.event(*servers_resource, registry=registry)
    async def server_changed(
        namespace: str | None, name: str, body: kopf.Body, type: str | None, **kwargs: Any
    ) -> None:
        operator.changed(body, spec_fingerprint(body), type, [(_namespaced(namespace), name)], _indexes(kwargs))
        operator.placer.changed(_namespaced(namespace))

    @kopf.on.event(*models_resource, registry=registry)
    async def model_changed(namespace: str | None, body: kopf.Body, type: str | None, **kwargs: Any) -> None:
        keys = model_server_keys(body)
        uid = body.get("metadata", {}).get("uid", "")
        previous = operator.server_of.get(uid, keys)  # a model that moved is unloaded from its old servers
        operator.server_of[uid] = keys
        if type == "DELETED":
            operator.server_of.pop(uid, None)
        operator.changed(body, spec_fingerprint(body), type, sorted({*keys, *previous}), _indexes(kwargs))
        if operator.model_touched(body, type):
            operator.retry_failed({key: {model_name_of(body)} for key in keys})
        operator.placer.changed(_namespaced(namespace))
        await operator.finalizer.model_event(body, type)

    @kopf.on.event("v1", "pods", labels=MANAGED_BY, registry=registry)
    async def pod_changed(
        namespace: str | None, labels: kopf.Labels, body: kopf.Body, type: str | None, **kwargs: Any
    ) -> None:
        key = (_namespaced(namespace), labels.get(INSTANCE_LABEL, ""))
        operator.changed(body, pod_view(body).fingerprint, type, [key], _indexes(kwargs))

    @kopf.on.event("apps", "v1", "deployments", labels=MANAGED_BY, registry=registry)
    @kopf.on.event("apps", "v1", "replicasets", labels=MANAGED_BY, registry=registry)
    async def owner_changed(
        namespace: str | None, labels: kopf.Labels, body: kopf.Body, type: str | None, **kwargs: Any
    ) -> None:
        """A link of its pods' owner chain made, changed or gone: the server's pods may have changed."""
        key = (_namespaced(namespace), labels.get(INSTANCE_LABEL, ""))
        operator.changed(body, digest([controller_uid(body)]), type, [key], _indexes(kwargs))

    @kopf.on.event("v1", "configmaps", registry=registry)
    async def config_map_changed(
        namespace: str | None, name: str, body: kopf.Body, type: str | None, **kwargs: Any
    ) -> None:
        users = sorted(
            {key for keys in kwargs["models_by_config_map"].get((_namespaced(namespace), name), []) for key in keys}
        )
        if users:
            operator.changed(body, digest([body.get("data"), body.get("binaryData")]), type, users, _indexes(kwargs))
        if users and type == "MODIFIED":  # a write of a model's files, the same data too: the user saved them again
            operator.retry_failed(
                {
                    key: {
                        model_name_of(model)
                        for model in kwargs["models"].get(key, [])
                        if model_config_map(model) == name
                    }
                    for key in users
                }
            )

    return operator
