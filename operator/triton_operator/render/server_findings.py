"""What a server's rendering is warned (or refused) about, beyond what its spec's own checks say: its
/dev/shm's size against its models' needs, a Service reachable from outside the cluster, NVIDIA's
full image serving a few backends. Each needs the server's rendered models, so it is checked once
the fleet is bound (render/fleet.py), not as the spec is read (api/validation.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..api.findings import Finding
from ..api.parse import object_id
from ..api.resources import TritonServer
from ..api.server import FULL_IMAGE_BACKENDS
from ..api.types import INT64_MAX, GiB
from ..api.validation import models_by_backend
from ..protocol.desired import DesiredModel
from .model_rendering import RenderedModel
from .shm import ShmPlan


def full_image_findings(server: TritonServer, models: Sequence[DesiredModel]) -> list[Finding]:
    """NVIDIA's full image, named in spec.image, for models that use at most half of its backends: each
    pod pulls gigabytes of backends no model loads (docs/slim-image.md gives the sizes). Left at the
    operator's default it is not warned about: the warning would then stand on nearly every server
    (the examples, `local`, which runs no image, and every status) for a choice nobody made, and a
    finding that cannot be answered but by building an image teaches to skip warnings; the README
    says where the default comes from and how to slim it. The models' configs are parsed only for such
    an image (a check on every pass)."""
    image = server.spec.image
    if "image" not in server.spec.model_fields_set or not _NVIDIA_FULL_IMAGE.search(image):
        return []
    used = models_by_backend(model.parsed_config() for model in models)
    if not used or len(used) * 2 > len(FULL_IMAGE_BACKENDS):
        return []
    return [
        Finding(
            "warning",
            "spec.image",
            f"image {image} carries {len(FULL_IMAGE_BACKENDS)} backends; the models here use "
            f"{len(used)} ({', '.join(used)}): `triton-operator image` writes a slim one",
            obj=object_id("TritonServer", server.metadata),
        )
    ]


# NVIDIA's full GPU image, from any registry (mirrors keep NVIDIA's tags), by tag or digest.
_NVIDIA_FULL_IMAGE = re.compile(r"(?:^|/)tritonserver:\d{2}\.\d{2}(?:\.\d+)?-py3(?:@.*)?$")


def exposure_findings(server: TritonServer) -> list[Finding]:
    """A Service reachable from outside the cluster is allowed only when meant (the API refuses it
    otherwise), and still said out loud: whoever reaches it can infer, and try every key."""
    service = server.spec.service
    if not service.expose_outside_cluster or service.type == "ClusterIP":
        return []
    admits = (
        "the server's NetworkPolicy lets in only spec.networkPolicy.inferenceFrom: add a "
        "NetworkPolicy of your own for the outside clients (policies add up)"
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


def shm_findings(server: TritonServer, models: tuple[RenderedModel, ...], shm: ShmPlan) -> list[Finding]:
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
                f"/dev/shm comes to {shm.size_limit_bytes / GiB:.0f} GiB, which each pod asks for as memory on top "
                f"of its requests, and few nodes have (largest share: model '{largest.model}' with "
                f"{largest.total_bytes / GiB:.0f} GiB): the pods may never be scheduled; check "
                "the models' instanceGroup counts and executionBytes",
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
                f"({', '.join(f'{s.model}: {s.total_bytes}' for s in shm.models)}, reload overlap "
                f"{shm.reload_overlap_bytes}, headroom {shm.headroom_bytes}); loads or inferences "
                "will fail with 'No space left on device' or "
                "'Failed to increase the shared memory pool size': raise it or use 'auto'",
                obj=object_id("TritonServer", server.metadata),
            )
        )
    return findings
