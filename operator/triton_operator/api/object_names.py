"""Object names as the API server checks them, for our objects and the objects named after them.

A TritonServer names its Service (a DNS-1035 label) and is a label value on its pods; a TritonModel
is a label value on its config ConfigMap. `validate` refuses what the API server would refuse
for any of them, so a name never fails at apply time, or later when the operator creates a child.
"""

from __future__ import annotations

import re

MAX_LABEL_LENGTH = 63
DEFAULT_SERVER = "triton"  # the TritonServer `import` writes for a repository, unless told another name
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# Any object's name, in the CRD's words (a pattern) for the objects a spec names.
DNS_SUBDOMAIN_PATTERN = rf"^{_DNS_SUBDOMAIN.pattern}$"
MAX_NAME_LENGTH = 253
_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _suggestion(name: str, allowed: str) -> str:
    """The name with what it may not hold replaced, e.g. Add_Sub -> add-sub."""
    suggested = re.sub(f"[^{allowed}]+", "-", name.lower()).strip("-.")[:MAX_LABEL_LENGTH].strip("-.")
    return f" (e.g. '{suggested}')" if suggested and suggested != name else ""


def model_name_problem(name: str) -> str:
    """Why a TritonModel cannot have this name, or "": a DNS subdomain (every object's name), at most 63
    characters (it is the label triton-operator.io/model on the model's config ConfigMap)."""
    if not _DNS_SUBDOMAIN.fullmatch(name):
        return (
            f"'{name}' is not a Kubernetes object name: use lower-case letters, digits, '-' and '.', starting and "
            f"ending with a letter or digit{_suggestion(name, 'a-z0-9.-')}; Triton's own name for the model "
            "(add_sub) goes into spec.modelName"
        )
    if len(name) > MAX_LABEL_LENGTH:
        return (
            f"is {len(name)} characters; at most {MAX_LABEL_LENGTH}, as the label triton-operator.io/model on the "
            "model's config ConfigMap carries it: shorten it (spec.modelName may stay long)"
        )
    return ""


def object_name_problem(name: str, kind: str) -> str:
    """Why no object of `kind` can have this name, or "": a DNS subdomain, at most 253 characters."""
    if len(name) <= MAX_NAME_LENGTH and _DNS_SUBDOMAIN.fullmatch(name):
        return ""
    return (
        f"{name!r} is no {kind}'s name: lower-case letters, digits, '-' and '.', at most {MAX_NAME_LENGTH}, starting "
        f"and ending with a letter or digit{_suggestion(name, 'a-z0-9.-')}"
    )


def server_name_problem(name: str, what: str = "a TritonServer's name") -> str:
    """Why a TritonServer cannot have this name, or "": its Service has the name, so a DNS-1035 label."""
    if len(name) > MAX_LABEL_LENGTH:
        return (
            f"is {len(name)} characters; {what} names its Service, which takes at most {MAX_LABEL_LENGTH}: shorten it"
        )
    if not _DNS_LABEL.fullmatch(name):
        return (
            f"'{name}' cannot be used: {what} names its Service, which takes lower-case letters, digits and '-', "
            f"starting with a letter and ending with a letter or digit{_suggestion(name, 'a-z0-9-')}"
        )
    return ""


def namespace_problem(namespace: str) -> str:
    """Why no namespace can have this name, or "" (a DNS-1123 label)."""
    if len(namespace) <= MAX_LABEL_LENGTH and _DNS_1123_LABEL.fullmatch(namespace):
        return ""
    return (
        f"'{namespace}' is not a namespace name: lower-case letters, digits and '-', at most {MAX_LABEL_LENGTH}, "
        f"starting and ending with a letter or digit{_suggestion(namespace, 'a-z0-9-')}"
    )
