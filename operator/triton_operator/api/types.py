"""Shared building blocks of the API: the base model, byte quantities, embedded Kubernetes types."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from kubernetes.utils.quantity import parse_quantity
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

GROUP = "triton-operator.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

MiB = 1 << 20


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are errors, not silently dropped."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


def with_cel_rules(*rules: tuple[str, str]) -> ConfigDict:
    """ApiModel's config plus CEL rules for the CRD: the API server's copy of a cross-field check.

    Each rule mirrors a pydantic validator of the same model; tests run both on the same inputs.
    """
    validations = [{"rule": rule, "message": message} for rule, message in rules]
    return ConfigDict(**ApiModel.model_config, json_schema_extra={"x-kubernetes-validations": validations})


def _bytes_from_quantity(value: Any) -> int:
    """Accept 268435456, "256Mi" or "1G"; a byte count must come out whole and non-negative."""
    if isinstance(value, bool):
        raise ValueError("expected a byte count such as 268435456 or a quantity such as 256Mi")
    try:
        parsed = parse_quantity(value)
    except (ValueError, TypeError, InvalidOperation):
        raise ValueError(f"{value!r} is not a byte count or a Kubernetes quantity (e.g. 256Mi, 1Gi)") from None
    if parsed < 0 or parsed != parsed.to_integral_value():
        raise ValueError(f"{value!r} must be a whole, non-negative number of bytes")
    return int(Decimal(parsed))


# Kubernetes' own quantity grammar, so the API server refuses "lots" as pydantic does.
QUANTITY_PATTERN = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"

ByteQuantity = Annotated[
    int,
    BeforeValidator(_bytes_from_quantity),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN}),
]


def kubernetes_object_field(description: str) -> Any:
    """An embedded Kubernetes type: opaque in the CRD (keeps it small), checked on the rendered pod."""
    return Field(default=None, description=f"{description} Checked with the Kubernetes schema when the pod is rendered.")


KubernetesObject = Annotated[
    dict[str, Any], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
]
KubernetesObjectList = Annotated[
    list[dict[str, Any]],
    WithJsonSchema({"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}),
]


class LocalObjectReference(ApiModel):
    name: str = Field(min_length=1, max_length=253, description="Name of an object in the same namespace.")

