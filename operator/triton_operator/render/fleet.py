"""From a set of TritonServer/TritonModel objects to what runs: configs, /dev/shm plans, manifests.

One pure pass shared by `validate`, `render` and the operator: parse every object, bind each
model to its server, check configs against Triton's rules and against the server, size
/dev/shm, and render the Kubernetes objects. Findings carry the object they belong to.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..api.parse import DEFAULT_NAMESPACE, located, object_id
from ..api.resources import ObjectMeta, TritonModel, TritonServer
from ..api.security import server_security_findings
from ..api.server import FULL_IMAGE_BACKENDS, NetworkPeer
from ..api.types import API_VERSION, INT64_MAX, GiB
from ..api.validation import (
    Finding,
    errors,
    models_by_backend,
    validate_against_server,
    validate_execution_env,
    validate_gpu_product,
    validate_model_config,
    validate_probe,
)
from ..protocol.desired import DesiredModel
from ..protocol.model_config import model_config_pb2
from . import autoscaling, manifests
from .config import built_model_config, desired_model
from .deployment import deployment_keeping_sizes
from .placement import placement_of
from .shm import ModelShm, ShmPlan, model_shm, shm_plan
from .sizing import PodMemory, pod_memory


@dataclass(frozen=True)
class RenderedModel:
    """A model's rendering: the model as listed and its revision (`desired`), the one value the pods
    load, the revision ConfigMaps keep and the status names. The operator keeps one per model for as
    long as it runs, so it holds no live protobuf message (`desired.parsed_config()` makes one)."""

    model: TritonModel
    desired: DesiredModel
    files: Mapping[str, bytes] = field(
        default_factory=dict
    )  # those its CR names (an ensemble loads an empty version folder)
    shm: ModelShm | None = None  # its share of its server's /dev/shm; None while it has no server

    @property
    def name(self) -> str:
        """Triton's name for it."""
        return self.desired.name

    @property
    def revision(self) -> str:
        return self.desired.revision

    @functools.cached_property
    def config_map(self) -> dict[str, Any]:
        """Its ConfigMap with the rendered config.pbtxt, made once for it: a kept rendering costs nothing
        the next pass. Never to be changed in place."""
        return manifests.model_config_map(self.model, self.revision, self.desired.config_pbtxt)

    def relisted(self, model: TritonModel) -> RenderedModel:
        """The same rendering for the model as listed again with the same spec (a status written, a label
        set): its revision is kept, what reads the model is made anew."""
        return dataclasses.replace(self, model=model)


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
    if existing is not None:
        return existing.model_copy(update={"spec": model.spec.server})
    metadata: dict[str, Any] = {"name": model.name, "labels": {OWNER_MODEL_LABEL: model.name}}
    if model.metadata.namespace:
        metadata["namespace"] = model.metadata.namespace
    return TritonServer.model_validate(
        {"apiVersion": API_VERSION, "kind": "TritonServer", "metadata": metadata, "spec": model.spec.server}
    )


@functools.lru_cache(maxsize=1024)
def _file_bytes(content: str, binary: bool = False) -> bytes:
    """A file's bytes from its ConfigMap's text: one copy for every model that names the same file (the
    operator keeps each model's rendering, and a fleet often shares one model.py)."""
    return base64.b64decode(content) if binary else content.encode()


def files_from_config_map(model: TritonModel, config_map: Mapping[str, Any]) -> tuple[dict[str, bytes], list[Finding]]:
    """The model's files out of its ConfigMap (`data` or `binaryData`), with a finding per missing key."""
    assert model.spec.files is not None
    reference = model.spec.files.config_map_ref
    data = config_map.get("data") or {}
    binary = config_map.get("binaryData") or {}
    files: dict[str, bytes] = {}
    findings: list[Finding] = []
    for index, item in enumerate(reference.items):
        if item.key in data:
            files[item.path] = _file_bytes(data[item.key])
        elif item.key in binary:
            files[item.path] = _file_bytes(binary[item.key], binary=True)
        else:
            findings.append(
                Finding(
                    "error",
                    f"spec.files.configMapRef.items[{index}].key",
                    f"ConfigMap '{reference.name}' has no key '{item.key}'; its keys: {', '.join(sorted([*data, *binary]))}",
                )
            )
    return files, findings


def _render_model(
    model: TritonModel, server: TritonServer | None, files: Mapping[str, bytes]
) -> tuple[RenderedModel | None, list[Finding]]:
    config, printed = built_model_config(model, files)
    declared_name = model.spec.config.get("name")
    findings = validate_model_config(config)
    findings += validate_probe(model.spec.rollout.probe if model.spec.rollout else None, config)
    findings += validate_execution_env(config, set(files) if model.spec.files is not None else None)
    if declared_name is not None and declared_name != model.model_name:
        findings.append(
            Finding(
                "error", "spec.config.name", f"the name comes from modelName ('{model.model_name}'): remove config.name"
            )
        )
    if server is not None:
        findings += validate_against_server(config, server.spec, has_files=model.spec.files is not None)
    if errors(findings):
        return None, findings
    shm = model_shm(model, config, server.spec) if server is not None else None
    desired = desired_model(config, files, model.spec.load_timeout_seconds, printed)
    return RenderedModel(model, desired, files, shm), findings


ModelRenderer = Callable[
    [TritonModel, TritonServer | None, Mapping[str, Any] | None], tuple[RenderedModel | None, list[Finding]]
]


def render_model(
    model: TritonModel, server: TritonServer | None, config_map: Mapping[str, Any] | None
) -> tuple[RenderedModel | None, list[Finding]]:
    """One model on its server (None: not there) with the ConfigMap its files name (None: none, or
    missing): its rendering, or None and the findings that refuse it. It reads nothing else, so a
    rendering can be kept while these stay the same."""
    files: dict[str, bytes] = {}
    missing: list[Finding] = []
    if model.spec.files is not None:
        reference = model.spec.files.config_map_ref.name
        if config_map is None:
            missing = [
                Finding(
                    "error",
                    "spec.files.configMapRef.name",
                    f"no ConfigMap '{reference}' in namespace '{_namespace(model.metadata)}'",
                )
            ]
        else:
            files, missing = files_from_config_map(model, config_map)
    rendered, findings = _render_model(model, server, files)
    return (None if missing else rendered), missing + findings


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
        fleet.findings += _shm_findings(server, rendered_models, shm)
        configs = [r.desired.parsed_config() for r in rendered_models]  # one message a model for this server's checks
        fleet.findings += autoscaling.batching_delay_findings(server, configs)
        fleet.findings += _exposure_findings(server)
        fleet.findings += _full_image_findings(server, configs)
    return fleet


def _full_image_findings(server: TritonServer, configs: list[model_config_pb2.ModelConfig]) -> list[Finding]:
    """NVIDIA's full image, named in spec.image, for models that use at most half of its backends: each
    pod pulls gigabytes of backends no model loads (24.09's full image is about 16.9 GB). Left at the
    operator's default it is not warned about: the warning would then stand on nearly every server
    (the examples, `local`, which runs no image, and every status) for a choice nobody made, and a
    finding that cannot be answered but by building an image teaches to skip warnings; the README
    says where the default comes from and how to slim it."""
    image = server.spec.image
    used = models_by_backend(configs)
    chosen = "image" in server.spec.model_fields_set
    if not chosen or not used or not _NVIDIA_FULL_IMAGE.search(image) or len(used) * 2 > len(FULL_IMAGE_BACKENDS):
        return []
    return [
        Finding(
            "warning",
            "spec.image",
            f"image {image} carries {len(FULL_IMAGE_BACKENDS)} backends; the models here use {len(used)} ({', '.join(used)}): "
            "`triton-operator image` writes a slim one",
            obj=object_id("TritonServer", server.metadata),
        )
    ]


# NVIDIA's full GPU image, from any registry (mirrors keep NVIDIA's tags), by tag or digest.
_NVIDIA_FULL_IMAGE = re.compile(r"(?:^|/)tritonserver:\d{2}\.\d{2}(?:\.\d+)?-py3(?:@.*)?$")


def _exposure_findings(server: TritonServer) -> list[Finding]:
    """A Service reachable from outside the cluster is allowed only when meant (the API refuses it
    otherwise), and still said out loud: whoever reaches it can infer, and try every key."""
    service = server.spec.service
    if not service.expose_outside_cluster or service.type == "ClusterIP":
        return []
    admits = (
        "the server's NetworkPolicy lets in only spec.networkPolicy.inferenceFrom: add a NetworkPolicy of your own for the "
        "outside clients (policies add up)"
        if server.spec.network_policy.enabled
        else "with spec.networkPolicy off, every client that reaches the nodes or the load balancer gets in"
    )
    return [
        Finding(
            "warning",
            "spec.service.exposeOutsideCluster",
            f"Service type {service.type} exposes Triton's inference, health and metadata APIs outside the cluster "
            f"(its administrative APIs answer only to the server's keys); {admits}",
            obj=object_id("TritonServer", server.metadata),
        )
    ]


# A /dev/shm above this is a typo's size far more often than a node's (it is memory the pod requests).
LARGE_SHM_BYTES = 256 * GiB


def _shm_findings(server: TritonServer, models: tuple[RenderedModel, ...], shm: ShmPlan) -> list[Finding]:
    findings = []
    if shm.size_limit_bytes > INT64_MAX:
        findings.append(
            Finding(
                "error",
                "spec.sharedMemory",
                f"/dev/shm comes to {shm.size_limit_bytes} bytes, more than a Kubernetes quantity holds (int64): "
                "lower the python backend's shm sizes, the models' executionBytes or client pools",
                obj=object_id("TritonServer", server.metadata),
            )
        )
    elif (
        server.spec.shared_memory.size_limit == "auto" and shm.size_limit_bytes > LARGE_SHM_BYTES
    ):  # a size set by hand is meant
        largest = max(shm.models, key=lambda share: share.total_bytes)
        findings.append(
            Finding(
                "warning",
                "spec.sharedMemory",
                f"/dev/shm comes to {shm.size_limit_bytes / GiB:.0f} GiB, which each pod asks for as memory on top of its "
                f"requests, and few nodes have (largest share: model '{largest.model}' with {largest.total_bytes / GiB:.0f} GiB): "
                "the pods may never be scheduled; check the models' instanceGroup counts and executionBytes",
                obj=object_id("TritonServer", server.metadata),
            )
        )
    for rendered in models:  # in the order of the shares: both by Triton's name
        share = rendered.shm
        if share is not None and not share.sized_from_config:
            model = rendered.model
            findings.append(
                Finding(
                    "warning",
                    "spec.sharedMemory.executionBytes",
                    f"model '{share.model}' runs on the python backend with variable-size tensors, so its /dev/shm "
                    "need is unknown; set executionBytes to the largest inputs plus outputs of one execution",
                    obj=object_id("TritonModel", model.metadata),
                )
            )
    if not shm.sufficient:
        findings.append(
            Finding(
                "warning",
                "spec.sharedMemory.sizeLimit",
                f"is {shm.size_limit_bytes} bytes but the models need {shm.required_bytes} "
                f"({', '.join(f'{s.model}: {s.total_bytes}' for s in shm.models)}, reload overlap {shm.reload_overlap_bytes}, "
                f"headroom {shm.headroom_bytes}); loads or inferences will fail with 'No space left on device' or "
                "'Failed to increase the shared memory pool size': raise it or use 'auto'",
                obj=object_id("TritonServer", server.metadata),
            )
        )
    return findings


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
