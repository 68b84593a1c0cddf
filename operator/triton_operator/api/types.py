"""Shared building blocks of the API: the base model, byte quantities, embedded Kubernetes types."""

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

GROUP = "triton-operator.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

MiB = 1 << 20
GiB = 1 << 30


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are errors, not silently dropped.

    Annotations are objects and an empty list or dict default is the value itself (pydantic copies
    it for each object), not a default_factory: both cost pydantic time at every start (tests/cli/test_startup.py).
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        # Validators are built at a model's first use, not at import: a command builds those of the
        # kinds it reads (validate of a model's file never builds a TritonServer's).
        defer_build=True,
    )


def with_cel_rules(*rules: tuple[str, str]) -> ConfigDict:
    """ApiModel's config plus CEL rules for the CRD: the API server's copy of a cross-field check.

    Each rule mirrors a pydantic validator of the same model; tests run both on the same inputs.
    """
    extra: JsonDict = {"x-kubernetes-validations": [{"rule": rule, "message": message} for rule, message in rules]}
    return ConfigDict(**ApiModel.model_config, json_schema_extra=extra)


def cel_string(text: str) -> str:
    """`text` as a CEL string literal the API server reads back unchanged: a raw one (r'...'), since in a
    plain one a regular expression's `\\.` is an invalid escape and the CRD's rule does not compile."""
    if "'" in text or "\n" in text:
        raise ValueError(f"no raw CEL literal holds {text!r}")
    return f"r'{text}'"


QUANTITY_MAX_LENGTH = 64  # the CRD says so too (its CEL rules' cost is estimated from it)
# Kubernetes' own quantity grammar, so the API server refuses "lots" as pydantic does.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# Byte counts are int64 in Kubernetes (a quantity's value) and in Triton (its byte-size flags are
# parsed with std::stol, which aborts the server on anything larger).
INT64_MAX = 2**63 - 1
# The quantities that stay within int64 bytes: a bounded number of digits per suffix (the largest,
# 999999Ti or 7Ei, are below 2**63), no sign and no milli-bytes. The API server applies it to strings;
# integers are int64 there anyway.
BYTE_QUANTITY_PATTERN = (
    r"^([0-9]{1,18}|[0-9]{1,15}(\.[0-9]+)?(k|Ki)|[0-9]{1,12}(\.[0-9]+)?(M|Mi)|[0-9]{1,9}(\.[0-9]+)?(G|Gi)"
    r"|[0-9]{1,6}(\.[0-9]+)?(T|Ti)|[0-9]{1,3}(\.[0-9]+)?(P|Pi)|[0-7](\.[0-9]+)?(E|Ei)|[0-9]{1,9}(\.[0-9]+)?[eE]\+?[0-9])$"
)
BYTE_QUANTITY_HINT = "a byte count such as 268435456 or a quantity such as 256Mi, 1.5Gi or 1e9, at most 7Ei (int64)"


_QUANTITY = re.compile(QUANTITY_PATTERN)
# Multipliers of Kubernetes' suffixes; an exponent suffix (1e3) is part of the number.
_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES = {"n": -3, "u": -2, "m": -1, "k": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}


def parse_quantity(value: int | str) -> Decimal:
    """A Kubernetes quantity's value, by the API server's grammar (the CRD's pattern).

    Our own rather than the kubernetes client's: importing that package would be a large share of the
    CLI's start-up (bench/RESULTS.md, "Measurements behind the design"), and its parser also takes what
    the API server refuses (NaN, " 5", 1_000). Same values otherwise (tests/api/test_quantity.py compares
    them).
    """
    if isinstance(value, int):
        return Decimal(value)
    if not isinstance(value, str) or not _QUANTITY.fullmatch(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    try:
        if value[-2:] in _BINARY_SUFFIXES:
            return Decimal(value[:-2]) * Decimal(1024) ** _BINARY_SUFFIXES[value[-2:]]
        if value[-1] in _DECIMAL_SUFFIXES:
            return Decimal(value[:-1]) * Decimal(1000) ** _DECIMAL_SUFFIXES[value[-1]]
        return Decimal(value)  # digits, with or without an exponent (1e3, 1.5E+2)
    except InvalidOperation:  # the pattern lets an exponent have a fraction (1e2.5): no number
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from None


def quantity(value: Any) -> Decimal:
    """A Kubernetes quantity (e.g. 500m, 2, 1.5Gi) as a number; refused in words a person can act on."""
    if isinstance(value, (bool, float)) or not isinstance(value, (int, str)):
        raise ValueError(
            f"{value!r} is not a Kubernetes quantity: write a whole number or a string such as 500m, 2 or 1Gi"
        )
    if isinstance(value, str) and len(value) > QUANTITY_MAX_LENGTH:
        raise ValueError(f"a quantity of {len(value)} characters is not one: at most {QUANTITY_MAX_LENGTH}")
    try:
        return parse_quantity(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 2, 256Mi, 1Gi)") from None


def bytes_from_quantity(value: Any) -> int:
    """A whole, non-negative byte count within int64, from 268435456, "256Mi" or "1e9"."""
    try:
        parsed = quantity(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a byte count: write {BYTE_QUANTITY_HINT}") from None
    if parsed < 0 or parsed != parsed.to_integral_value():
        raise ValueError(
            f"{value!r} must be a whole, non-negative number of bytes (m means thousandths: for memory, did you mean "
            "Mi?)"
        )
    if parsed > INT64_MAX or (isinstance(value, str) and not re.match(BYTE_QUANTITY_PATTERN, value)):
        raise ValueError(f"{value!r} is out of range: write {BYTE_QUANTITY_HINT}")
    return int(parsed)


ByteQuantity = Annotated[
    int,
    BeforeValidator(bytes_from_quantity),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": BYTE_QUANTITY_PATTERN}),
]


def kubernetes_object_field(description: str) -> Any:
    """An embedded Kubernetes type: opaque in the CRD (keeps it small), checked on the rendered pod."""
    return Field(
        default=None, description=f"{description} Checked with the Kubernetes schema when the pod is rendered."
    )


KubernetesObject = Annotated[
    dict[str, Any], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
]
KubernetesObjectList = Annotated[
    list[dict[str, Any]],
    WithJsonSchema({"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}),
]


# Control characters (NUL, newline, escape, ...): nothing a path or a command-line argument may hold. A NUL
# ends a C string early (what Triton or the kernel reads differs from what was validated) and Python's
# file calls refuse it outright; the others make a different name look the same in a listing or a log.
CONTROL_CHARACTER = r"[\x00-\x1f\x7f]"
PLAIN_TEXT_PATTERN = r"^[^\x00-\x1f\x7f]*$"


def without_control_characters(value: Any) -> Any:
    """Refused before any pattern, so the message says which character and where, not only "no match"."""
    if isinstance(value, str) and (found := re.search(CONTROL_CHARACTER, value)):
        raise ValueError(
            f"{value!r} holds a control character (U+{ord(found.group()):04X}) at position {found.start()}: "
            "it would reach a file name or Triton's command line; remove it"
        )
    return value


# A string that reaches the filesystem or a command line: the API server's pattern and pydantic's check agree.
PlainText = Annotated[str, StringConstraints(pattern=PLAIN_TEXT_PATTERN), BeforeValidator(without_control_characters)]


# A backend's, repository agent's or cache's name: a folder of Triton's install (/opt/tritonserver/backends/NAME)
# and a word of the Dockerfile `triton-operator image` writes, so nothing that could end or extend an instruction
# there.
COMPONENT_NAME_PATTERN = r"^[A-Za-z0-9_][-A-Za-z0-9_.]{0,62}$"


def component_name_problem(kind: str, name: str) -> str:
    """Why `name` cannot be the name of a backend, repository agent or cache (`kind`), or ""."""
    if re.fullmatch(COMPONENT_NAME_PATTERN, name):
        return ""
    return (
        f"{name!r} cannot be a {kind} name, which is a folder of Triton's install and a word of the Dockerfile "
        "`triton-operator image` writes: use letters, digits, '_', '.' and '-', starting with a letter, digit or "
        "'_', at most 63 (e.g. onnxruntime)"
    )


def _backend_name(value: Any) -> Any:
    if isinstance(value, str) and (problem := component_name_problem("backend", value)):
        raise ValueError(problem)
    return value


BackendName = Annotated[str, StringConstraints(pattern=COMPONENT_NAME_PATTERN), BeforeValidator(_backend_name)]


# A path inside a folder the operator or Triton gives (a model's, its version's, its warmup's, a volume's): relative,
# segments of one spelling (none empty, none `.` or `..`), no control characters. A pattern, not a CEL rule: the
# API server applies patterns at no cost, where a CEL regex over each warmup input's file cost the CRD its budget.
_NAME_CHARACTER = r"[^/\x00-\x1f\x7f]"
# A segment of at most 255 characters (NAME_MAX; bytes, which a pattern cannot count, are checked in Python) that is not
# `.` or `..`: it starts with no dot, or with one dot and no second, or with two and more after them.
_SEGMENT = (
    rf"([^./\x00-\x1f\x7f]{_NAME_CHARACTER}{{0,254}}|[.][^./\x00-\x1f\x7f]{_NAME_CHARACTER}{{0,253}}"
    rf"|[.][.]{_NAME_CHARACTER}{{1,253}})"
)
RELATIVE_PATH_PATTERN = f"^({_SEGMENT}(/{_SEGMENT})*/?)?$"
DOT_SEGMENT = r"(^|/)[.][.]?(/|$)"


def relative_path_problem(path: str) -> str:
    """Why `path` is no path inside its folder, or ""."""
    if found := re.search(CONTROL_CHARACTER, path):
        return f"{path!r} holds a control character (U+{ord(found.group()):04X}) at position {found.start()}: remove it"
    if path.startswith("/") or re.search(DOT_SEGMENT, path):
        return f"{path!r} leaves its folder (an absolute path, or a '.' or '..' segment): name a path inside it"
    return ""


def _relative_path(value: Any) -> Any:
    if isinstance(value, str) and (problem := relative_path_problem(value)):
        raise ValueError(problem)
    return value


RelativePath = Annotated[str, StringConstraints(pattern=RELATIVE_PATH_PATTERN), BeforeValidator(_relative_path)]

# A container image reference, in the grammar of the distribution project's reference package: [registry[:port]/]
# lowercase path components, then a tag and/or a digest. Nothing else reaches the pod's image field.
_IMAGE_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REGISTRY = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?"
IMAGE_PATTERN = (
    rf"^(?:{_IMAGE_REGISTRY}/)?{_IMAGE_PATH}(?:/{_IMAGE_PATH})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)


def _image_reference(value: Any) -> Any:
    if isinstance(value, str) and not re.fullmatch(IMAGE_PATTERN, value):
        raise ValueError(
            f"{value!r} is no image reference: write [registry[:port]/]repository[:tag][@digest], the repository in "
            "lowercase letters, digits and separators (e.g. nvcr.io/nvidia/tritonserver:25.07-py3), with no spaces, "
            "control characters or '..'"
        )
    return value


ImageReference = Annotated[str, StringConstraints(pattern=IMAGE_PATTERN), BeforeValidator(_image_reference)]


class LocalObjectReference(ApiModel):
    name: str = Field(min_length=1, max_length=253, description="Name of an object in the same namespace.")


class LabelSelectorRequirement(ApiModel):
    """One of Kubernetes' set-based label requirements: `key operator values`."""

    model_config = with_cel_rules(
        (
            "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 : !has(self.values) || "
            "size(self.values) == 0",
            "In and NotIn need values; Exists and DoesNotExist take none",
        ),
    )

    key: str = Field(min_length=1, max_length=317, description="The label's key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default=[], max_length=64, description="The label's values, for In and NotIn.")

    @model_validator(mode="after")
    def _values_fit_the_operator(self) -> Self:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(
                f"{self.operator} needs values: the label values {self.key} "
                f"may{' not' if self.operator == 'NotIn' else ''} have"
            )
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"{self.operator} takes no values: remove them, or use In or NotIn")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        return (
            (labels.get(self.key) in self.values) == (self.operator == "In")
            if self.key in labels
            else self.operator == "NotIn"
        )


class LabelSelector(ApiModel):
    """Kubernetes' label selector: every matchLabels pair and every matchExpressions requirement hold.
    An empty selector matches every object, as Kubernetes' does."""

    match_labels: dict[str, str] = Field(default={}, description="Labels the object must have, with these values.")
    match_expressions: list[LabelSelectorRequirement] = Field(
        default=[], max_length=32, description="Requirements on the object's labels."
    )

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.match_labels.items()) and all(
            requirement.matches(labels) for requirement in self.match_expressions
        )

    def __str__(self) -> str:
        """As kubectl writes a selector: "pool=gpu,tier in (a,b),!legacy"; "(everything)" when empty."""
        words = {"In": "in", "NotIn": "notin"}
        parts = [f"{key}={value}" for key, value in sorted(self.match_labels.items())]
        for requirement in self.match_expressions:
            if requirement.operator in words:
                parts.append(f"{requirement.key} {words[requirement.operator]} ({','.join(requirement.values)})")
            else:
                parts.append(requirement.key if requirement.operator == "Exists" else f"!{requirement.key}")
        return ",".join(parts) or "(everything)"
