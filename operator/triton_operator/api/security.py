"""What a server's spec leaves open: a Triton image older than the fix of its last security advisories
(a warning: an image patched by a cluster's own build passes for older), sidecars that share a process
namespace with tritonserver, whose command line holds its keys (a warning), and security contexts that give
a container of the pod what the restricted Pod Security Standard forbids, or a second container of one
name (errors: the server is refused until they are gone).

The pods meet the restricted standard by default (render/deployment.py merges a user's contexts over
these defaults); each field is held to that standard as the container gets it. A field a sidecar leaves
out stays as Kubernetes leaves it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .findings import Finding, Findings
from .server import TritonServerSpec

# The release that fixed the last advisories known here, and what they were.
ADVISORY_FIX_RELEASE = (25, 7)
ADVISORIES = (
    "CVE-2025-23319, CVE-2025-23320 and CVE-2025-23334 (the shared-memory API reaching the python backend's own "
    "memory: remote code execution) and CVE-2025-23310, CVE-2025-23311 (a stack overflow in the HTTP server, "
    "unauthenticated)"
)
# NVIDIA's tags: YY.MM, then a variant (-py3, -py3-min, -vllm-python-py3, ...) or a patch (20.03.1-py3).
_TRITON_TAG = re.compile(r"(?:^|/)tritonserver:(?P<year>\d{2})\.(?P<month>\d{2})(?:[.-][^@/]*)?(?:@.*)?$")


def triton_release(image: str) -> tuple[int, int] | None:
    """(year, month) of a `tritonserver:YY.MM...` image, from any registry (mirrors keep NVIDIA's tags);
    None for other images and for a tritonserver pinned by digest alone."""
    match = _TRITON_TAG.search(image)
    return (int(match["year"]), int(match["month"])) if match else None


def image_problem(image: str) -> str:
    """Why the image is known to be vulnerable, or "" (a newer or an unknown image)."""
    release = triton_release(image)
    if release is None or release >= ADVISORY_FIX_RELEASE:
        return ""
    fixed = "{:02d}.{:02d}".format(*ADVISORY_FIX_RELEASE)
    return (
        f"{image} is Triton {release[0]:02d}.{release[1]:02d}, older than {fixed}, which fixed {ADVISORIES}: "
        f"use tritonserver:{fixed}-py3 or later (leave spec.image out for the operator's default)"
    )


# The containers the operator puts into every pod (Triton's) or into some (the memory sidecar): no sidecar may
# take their names, nor another sidecar's.
TRITON_CONTAINER = "tritonserver"
MEMORY_READER_CONTAINER = "memory-reader"
NON_ROOT_ID = 1000
# The restricted Pod Security Standard's settings, what a pod gets unless its spec says otherwise.
RESTRICTED_POD_SECURITY_CONTEXT: Mapping[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": NON_ROOT_ID,
    "runAsGroup": NON_ROOT_ID,
    "fsGroup": NON_ROOT_ID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_CONTAINER_SECURITY_CONTEXT: Mapping[str, Any] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
# What the restricted standard lets a container add to its capabilities, and run under by seccomp.
_ADDABLE_CAPABILITIES = {"NET_BIND_SERVICE"}
_SECCOMP_PROFILES = {"RuntimeDefault", "Localhost"}


def merged_over(defaults: Mapping[str, Any], given: Mapping[str, Any] | None) -> dict[str, Any]:
    """`given` over `defaults`, field by field at every depth: what the user sets wins and every default
    they leave out stays (`fsGroup: 2000` alone keeps runAsNonRoot and the seccomp profile). Lists and
    other values are replaced whole."""
    merged = dict(defaults)
    for key, value in (given or {}).items():
        default = merged.get(key)
        merged[key] = (
            merged_over(default, value) if isinstance(default, Mapping) and isinstance(value, Mapping) else value
        )
    return merged


def _profile(context: Mapping[str, Any], field: str) -> Any:
    profile = context.get(field)
    return profile.get("type") if isinstance(profile, Mapping) else None


def _forbidden(context: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Each field of a securityContext, as the container gets it, that the restricted Pod Security Standard
    forbids, and what it lets the container do. A field left out or null falls to the pod's."""
    found = []
    if context.get("privileged") is True:
        found.append(("privileged", "runs privileged (every device and capability of the node)"))
    if context.get("allowPrivilegeEscalation") is True:
        found.append(("allowPrivilegeEscalation", "lets a process gain privileges its parent lacks (setuid binaries)"))
    if context.get("runAsNonRoot") is False:
        found.append(("runAsNonRoot", "may run as root (runAsNonRoot: false)"))
    if context.get("runAsUser") == 0:
        found.append(("runAsUser", "runs as root (user 0)"))
    if (seccomp := _profile(context, "seccompProfile")) not in (None, *_SECCOMP_PROFILES):
        found.append(("seccompProfile.type", f"runs {seccomp} by seccomp (any system call)"))
    if _profile(context, "appArmorProfile") == "Unconfined":
        found.append(("appArmorProfile.type", "runs unconfined by AppArmor"))
    if context.get("procMount") not in (None, "Default"):
        found.append(("procMount", f"mounts /proc {context['procMount']} (the node's kernel settings unmasked)"))
    windows = context.get("windowsOptions")
    if isinstance(windows, Mapping) and windows.get("hostProcess") is True:
        found.append(("windowsOptions.hostProcess", "runs as a process of the (Windows) node itself"))
    if "capabilities" in context:
        capabilities = context["capabilities"]
        if not isinstance(capabilities, Mapping):
            found.append(("capabilities", "keeps every capability the runtime gives (capabilities: null drops none)"))
            return found
        added = [str(name) for name in capabilities.get("add") or [] if name not in _ADDABLE_CAPABILITIES]
        if added:
            found.append(("capabilities.add", f"adds Linux capabilities {', '.join(added)}"))
        if "drop" in capabilities and "ALL" not in (capabilities.get("drop") or []):
            found.append(("capabilities.drop", "keeps the Linux capabilities the runtime gives (drop has no ALL)"))
    return found


def _unset_in_pod(given: Mapping[str, Any], containers: list[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The operator's defaults the pod's context sets to null and not every container makes up for: the standard
    asks every container to run as non-root and under a seccomp profile, by the pod's context or by its own."""
    found = []
    runs_as_root = not all(container.get("runAsNonRoot") is True for container in containers)
    if "runAsNonRoot" in given and given["runAsNonRoot"] is None and runs_as_root:
        found.append(("runAsNonRoot", "lets its containers run as root (runAsNonRoot: null)"))
    unconfined = not all(_profile(container, "seccompProfile") in _SECCOMP_PROFILES for container in containers)
    if "seccompProfile" in given and given["seccompProfile"] is None and unconfined:
        found.append(("seccompProfile", "leaves its containers without a seccomp profile (the runtime's: often none)"))
    return found


_FORBIDS = (
    "which the restricted Pod Security Standard forbids (a namespace that enforces it refuses the pods; elsewhere "
    "the container has that power, beside Triton's /dev/shm where the python models' tensors live): remove it"
)


def _contexts(spec: TritonServerSpec) -> list[tuple[str, Mapping[str, Any], str]]:
    """Every container's securityContext as the pod gets it (Triton's over the operator's defaults, a sidecar's
    as written), with its path in the spec and whose it is."""
    triton = merged_over(RESTRICTED_CONTAINER_SECURITY_CONTEXT, spec.pod.container_security_context)
    contexts: list[tuple[str, Mapping[str, Any], str]] = [
        ("spec.pod.containerSecurityContext", triton, f"the {TRITON_CONTAINER} container")
    ]
    for index, sidecar in enumerate(spec.pod.sidecars or []):
        context = sidecar.get("securityContext") or {}
        if isinstance(context, Mapping):
            where = f"spec.pod.sidecars[{index}].securityContext"
            contexts.append((where, context, f"sidecar '{sidecar.get('name', index)}'"))
    return contexts


def pod_security_findings(spec: TritonServerSpec) -> list[Finding]:
    """An error per field of the pod's security contexts that the restricted Pod Security Standard forbids, and
    per sidecar named as another container of the pod: the server is refused until they are gone."""
    found = Findings()
    given = spec.pod.security_context or {}
    for field, why in _forbidden(given):
        found.error(f"spec.pod.securityContext.{field}", f"every container of the pod {why}, {_FORBIDS}")
    containers = _contexts(spec)
    for field, why in _unset_in_pod(given, [context for _, context, _ in containers]):
        found.error(f"spec.pod.securityContext.{field}", f"the pod {why}, {_FORBIDS}")
    for path, context, who in containers:
        for field, why in _forbidden(context):
            found.error(f"{path}.{field}", f"{who} {why}, {_FORBIDS}")
    taken = {TRITON_CONTAINER, MEMORY_READER_CONTAINER}
    for index, sidecar in enumerate(spec.pod.sidecars or []):
        name = sidecar.get("name")
        if name in taken:
            found.error(
                f"spec.pod.sidecars[{index}].name",
                f"'{name}' is the name of another container of the pod ({', '.join(sorted(taken))}): two containers "
                "of one name make no pod, and a patch by name would merge them; name it otherwise",
            )
        if isinstance(name, str):
            taken.add(name)
    return found


def shared_process_findings(spec: TritonServerSpec) -> list[Finding]:
    """The memory reader shares the pod's process namespace (shareProcessNamespace), so every container
    of the pod sees tritonserver's command line in /proc, and Triton takes its keys there only (no file,
    no environment variable: a `$(VAR)` in the args is expanded onto it). With the user's sidecars beside
    it, they read both keys."""
    if not (spec.memory_reader.enabled and spec.pod.sidecars):
        return []
    names = ", ".join(f"'{sidecar.get('name', index)}'" for index, sidecar in enumerate(spec.pod.sidecars))
    return [
        Finding(
            "warning",
            "spec.memoryReader.enabled",
            f"shares the pod's process namespace with sidecars {names}: they can read tritonserver's command line, "
            "which holds both of the server's keys, the control key (load, unload and configure models, read their "
            "statistics) and the shared-memory key (Triton takes them on its command line only); turn the memory "
            "reader off, or run only sidecars you would trust with the control key",
        )
    ]


def server_security_findings(spec: TritonServerSpec) -> list[Finding]:
    """The warnings of a server's spec: an image older than the fix of its release's advisories, and sidecars
    that can read its keys."""
    problem = image_problem(spec.image)
    return ([Finding("warning", "spec.image", problem)] if problem else []) + shared_process_findings(spec)
