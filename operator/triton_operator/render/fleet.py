"""From a set of TritonServer/TritonModel objects to what runs: configs, /dev/shm plans, manifests.

One pure pass shared by `validate`, `render` and the operator: parse every object, bind each
model to its server, check configs against Triton's rules and against the server, size
/dev/shm, and render the Kubernetes objects. Findings carry the object they belong to. One model's
rendering is render/model_rendering.py's; what a bound server is warned about, render/server_findings.py's.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..api.findings import Finding, errors
from ..api.parse import DEFAULT_NAMESPACE, located, object_id
from ..api.resources import ObjectMeta, TritonModel, TritonServer
from ..api.security import server_security_findings
from ..api.server_checks import validate_gpu_product
from ..api.traffic import NetworkPeer
from ..api.types import API_VERSION
from . import autoscaler_manifests as autoscaling
from . import manifests, server_findings
from .deployment import deployment_keeping_sizes
from .model_rendering import ModelRenderer, RenderedModel, render_model
from .placement import Placement, namespaced_name, placement_of
from .shm import ShmPlan, shm_plan
from .sizing import PodMemory, pod_memory


@dataclass(frozen=True)
class RenderedServer:
    server: TritonServer
    models: tuple[RenderedModel, ...]
    shm: ShmPlan
    owner: TritonModel | None = None  # the model whose inline `server:` this is

    @functools.cached_property
    def memory(self) -> PodMemory | None:
        """Its pods' memory, derived from the models it holds; None where its spec sets it."""
        return pod_memory(self.server.spec, (r.model for r in self.models))

    def rendering_of(self, model: TritonModel) -> RenderedModel | None:
        """The model's rendering on this server; None when it is not among them (refused, or elsewhere)."""
        return self._by_object_name.get(model.name)

    @functools.cached_property
    def _by_object_name(self) -> dict[str, RenderedModel]:
        return {r.model.name: r for r in self.models}


@dataclass
class Fleet:
    servers: list[RenderedServer] = field(default_factory=list)
    unbound: list[RenderedModel] = field(default_factory=list)  # checked alone: their server is not (yet) there
    findings: list[Finding] = field(default_factory=list)
    refused: set[str] = field(default_factory=set)  # objects left out for their errors

    def refuse(self, *findings: Finding) -> None:
        """Record why objects are left out, and that they are."""
        self.findings += findings
        self.refused |= {finding.obj for finding in findings}

    @property
    def errors(self) -> list[Finding]:
        return errors(self.findings)


OWNER_MODEL_LABEL = "triton-operator.io/owner-model"


def child_server(model: TritonModel, existing: TritonServer | None = None) -> TritonServer:
    """The TritonServer an inline `server:` stands for: named after the model, owned by it.

    In a cluster the child exists as an object; its identity (uid) is kept, its spec is the model's.
    """
    assert model.spec.server is not None
    spec = model.spec.server.server_spec()
    if existing is not None:
        return existing.model_copy(update={"spec": spec})
    metadata: dict[str, Any] = {"name": model.name, "labels": {OWNER_MODEL_LABEL: model.name}}
    if model.metadata.namespace:
        metadata["namespace"] = model.metadata.namespace
    return TritonServer.model_validate(
        {"apiVersion": API_VERSION, "kind": "TritonServer", "metadata": metadata, "spec": spec}
    )


# A model waits for its server (as it would in a cluster); what needs the server is not checked yet.
_CHECKED_ALONE = (
    "the config was checked alone, not against the server (its backends, GPUs, model repository and /dev/shm size)"
)
_NO_SERVER = (
    "no TritonServer '{server}' in namespace '{namespace}': "
    + _CHECKED_ALONE
    + "; give the server's file too to check those"
)
_PLACED = "to be placed on a TritonServer matching {selector} with room for it"
_SERVER_REFUSED = (
    "TritonServer '{server}' in namespace '{namespace}' is refused for its errors: "
    + _CHECKED_ALONE
    + "; fix the server to check those"
)


def _namespace(metadata: ObjectMeta) -> str:
    return metadata.namespace or DEFAULT_NAMESPACE


def plan_fleet(
    servers: Iterable[TritonServer],
    models: Iterable[TritonModel],
    config_maps: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
    earlier: Iterable[Finding] = (),
    render: ModelRenderer = render_model,
    placed: Mapping[tuple[str, str], str] | None = None,
) -> Fleet:
    """Bind, check and size. A model with errors is left out of its server (the findings say why).

    `config_maps` maps (namespace, name) to the ConfigMaps that hold model files. `earlier` are the
    findings of reading and parsing: an object they hold an error for is refused, and a model whose
    server is among those is told so rather than that its server is missing. `render` renders one
    model (render_model, or one that keeps its results: the operator's). `placed`: the server of each
    model with a serverSelector, by (namespace, name), as the operator placed it; None: placed here by
    the same rule (render/placement.py), from the specs alone.
    """
    fleet = Fleet(findings=list(earlier))
    fleet.refused = {finding.obj for finding in fleet.errors if finding.obj}
    config_maps = config_maps or {}
    owners: dict[tuple[str, str], TritonModel] = {}
    by_key: dict[tuple[str, str], TritonServer] = {
        (_namespace(server.metadata), server.name): server for server in servers
    }
    bound: dict[tuple[str, str], list[RenderedModel]] = {}
    names_on_server: dict[tuple[str, str], dict[str, str]] = {}
    models = list(models)
    for model in models:  # inline servers first: a model can name one that a model listed after it declares
        if model.spec.server is None:
            continue
        key = (_namespace(model.metadata), model.name)
        existing = by_key.get(key)
        own_child = existing is not None and existing.metadata.labels.get(OWNER_MODEL_LABEL) == model.name
        if existing is not None and not own_child and key not in owners:
            obj = object_id("TritonModel", model.metadata)
            fleet.refuse(
                Finding(
                    "error",
                    "spec.server",
                    f"a TritonServer named '{model.name}' already exists; use serverRef or rename the model",
                    obj,
                )
            )
            continue
        by_key[key] = child_server(model, existing if own_child else None)
        owners[key] = model
    unschedulable: dict[tuple[str, str], str] = {}
    if placed is None:
        placement = placement_of(
            by_key.values(),
            [model for model in models if object_id("TritonModel", model.metadata) not in fleet.refused],
        )
        placed = {
            (p.model.namespace, p.model.name): p.server
            for p in placement.models
            if p.model.selector is not None and p.server
        }
        unschedulable = {
            (p.model.namespace, p.model.name): p.message
            for p in placement.models
            if p.model.selector is not None and not p.server
        }
    for model in models:
        obj = object_id("TritonModel", model.metadata)
        namespace = _namespace(model.metadata)
        server_name = model.server_name or placed.get((namespace, model.name))
        key = (namespace, server_name or "")
        if model.spec.server is not None and owners.get(key) is not model:
            continue  # refused above: its name is another TritonServer's
        server = by_key.get(key) if server_name is not None else None
        config_map = (
            config_maps.get((namespace, model.spec.files.config_map_ref.name)) if model.spec.files is not None else None
        )
        rendered, findings = render(model, server, config_map)
        if rendered is None:
            fleet.refuse(*located(findings, obj))
            continue
        fleet.findings += located(findings, obj)
        if server_name is None:
            message = unschedulable.get((namespace, model.name)) or _PLACED.format(selector=model.spec.server_selector)
            fleet.findings.append(Finding("warning", "spec.serverSelector", f"{message}: {_CHECKED_ALONE}", obj))
            fleet.unbound.append(rendered)
            continue
        if server is None:
            refused = object_id("TritonServer", {"name": server_name, "namespace": namespace}) in fleet.refused
            message = (_SERVER_REFUSED if refused else _NO_SERVER).format(server=server_name, namespace=namespace)
            fleet.findings.append(Finding("warning", "spec.serverRef.name", message, obj))
            fleet.unbound.append(rendered)
            continue
        other = names_on_server.setdefault(key, {}).setdefault(model.model_name, model.name)
        if other != model.name:
            fleet.refuse(
                Finding(
                    "error",
                    "spec.modelName",
                    f"TritonModel '{other}' already serves '{model.model_name}' on server '{key[1]}'",
                    obj,
                )
            )
            continue
        bound.setdefault(key, []).append(rendered)
    for key, server in sorted(by_key.items()):
        rendered_models = tuple(sorted(bound.get(key, []), key=lambda r: r.model.model_name))
        shm = shm_plan(server.spec, [r.shm for r in rendered_models if r.shm is not None])
        fleet.servers.append(RenderedServer(server, rendered_models, shm, owner=owners.get(key)))
        fleet.findings += located(server_security_findings(server.spec), object_id("TritonServer", server.metadata))
        fleet.findings += located(validate_gpu_product(server.spec), object_id("TritonServer", server.metadata))
        fleet.findings += server_findings.shm_findings(server, rendered_models, shm)
        desired = [r.desired for r in rendered_models]
        fleet.findings += autoscaling.batching_delay_findings(server, desired)
        fleet.findings += server_findings.exposure_findings(server)
        fleet.findings += server_findings.full_image_findings(server, desired)
    return fleet


def server_objects(
    rendered: RenderedServer,
    keys: Mapping[manifests.KeySecret, str] | None = None,
    deployed: Mapping[str, Any] | None = None,
    key_digests: Mapping[manifests.KeySecret, str] | None = None,
    operator: NetworkPeer = manifests.OPERATOR_PEER,
) -> list[dict[str, Any]]:
    """The Kubernetes objects of one server (and the child TritonServer of an inline one, and its
    autoscaler). `keys` fill the key Secrets (placeholders the operator fills where a key is not
    given). `deployed` is the Deployment as it runs, whose larger automatic /dev/shm and derived memory
    are kept until the pods roll anyway. `key_digests` are the operator's, of the keys its pods get: files rendered
    without an operator carry none (as they carry no owner references), so they stay the same from run
    to run. `operator` is where the operator's pods run, let in to the pods' gRPC port."""
    objects = [] if rendered.owner is None else [manifests.child_server_object(rendered.server, rendered.owner)]
    return [
        *objects,
        *(manifests.key_secret(rendered.server, which, (keys or {}).get(which)) for which in manifests.KEY_SECRETS),
        deployment_keeping_sizes(rendered.server, rendered.shm, rendered.memory, deployed, key_digests),
        manifests.service(rendered.server),
        *manifests.network_policy(rendered.server, operator),
        *autoscaling.autoscaler_objects(rendered.server),
    ]


def model_config_maps(models: Iterable[RenderedModel]) -> list[dict[str, Any]]:
    return [r.config_map for r in models]


def fleet_placement(fleet: Fleet) -> Placement:
    """The placement of a fleet read from files: its servers (inline ones too) and every model not refused,
    those that name a server counted on it, those placed kept where the fleet bound them."""
    bound = {namespaced_name(r.model): rendered.server.name for rendered in fleet.servers for r in rendered.models}
    models = [r.model for rendered in fleet.servers for r in rendered.models] + [r.model for r in fleet.unbound]
    return placement_of([rendered.server for rendered in fleet.servers], models, bound)
