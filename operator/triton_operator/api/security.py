"""What a server's spec leaves open, said as warnings before any pod runs: a Triton image older than
the fix of its last security advisories, containers of the pod that run privileged or as root, and
sidecars that share a process namespace with tritonserver, whose command line holds its keys.

Warnings, not errors: a cluster may have its reasons (an image patched by its own build, a sidecar
that must manage devices), and refusing would stop those servers from being updated at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .findings import Finding
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


# The fields of a securityContext that give a container more than the restricted Pod Security Standard allows.
def _privileges(context: Mapping[str, Any]) -> list[tuple[str, str]]:
    found = []
    if context.get("privileged") is True:
        found.append(("privileged", "runs privileged (every device and capability of the node)"))
    if context.get("runAsUser") == 0:
        found.append(("runAsUser", "runs as root (user 0)"))
    if context.get("runAsNonRoot") is False:
        found.append(("runAsNonRoot", "may run as root (runAsNonRoot: false)"))
    if context.get("allowPrivilegeEscalation") is True:
        found.append(("allowPrivilegeEscalation", "lets a process gain privileges its parent lacks (setuid binaries)"))
    added = (context.get("capabilities") or {}).get("add") if isinstance(context.get("capabilities"), Mapping) else None
    if added:
        found.append(("capabilities.add", f"adds Linux capabilities {', '.join(map(str, added))}"))
    return found


def privilege_findings(spec: TritonServerSpec) -> list[Finding]:
    """A warning per field that runs a container of the pod privileged or as root, naming that field."""
    pod = spec.pod
    contexts: list[tuple[str, Any, str]] = [
        ("spec.pod.securityContext", pod.security_context, "every container of the pod"),
        ("spec.pod.containerSecurityContext", pod.container_security_context, "the tritonserver container"),
    ]
    contexts += [
        (
            f"spec.pod.sidecars[{index}].securityContext",
            sidecar.get("securityContext"),
            f"sidecar '{sidecar.get('name', index)}'",
        )
        for index, sidecar in enumerate(pod.sidecars or [])
    ]
    return [
        Finding(
            "warning",
            f"{path}.{field}",
            f"{who} {why}; it shares /dev/shm with Triton, where the python models' tensors live: remove it unless "
            "the container cannot work without it",
        )
        for path, context, who in contexts
        if isinstance(context, Mapping)
        for field, why in _privileges(context)
    ]


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
    problem = image_problem(spec.image)
    return (
        ([Finding("warning", "spec.image", problem)] if problem else [])
        + privilege_findings(spec)
        + shared_process_findings(spec)
    )
