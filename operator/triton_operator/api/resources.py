"""The two custom resources as whole objects, and reading them from YAML documents."""

from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from .model import TritonModelSpec
from .server import TritonServerSpec
from .status_fields import TritonModelStatus, TritonServerStatus
from .types import API_VERSION, ApiModel


class ObjectMeta(BaseModel):
    """The metadata fields the operator reads; everything else the API server adds is kept as is."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1, max_length=253)
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default={})
    annotations: dict[str, str] = Field(default={})


class TritonServer(ApiModel):
    api_version: Literal[API_VERSION]  # type: ignore[valid-type]  # built from GROUP and VERSION: pydantic reads the value, mypy wants a literal
    kind: Literal["TritonServer"]
    metadata: ObjectMeta
    spec: TritonServerSpec = Field(default_factory=TritonServerSpec)
    status: TritonServerStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name


class TritonModel(ApiModel):
    api_version: Literal[API_VERSION]  # type: ignore[valid-type]  # built from GROUP and VERSION: pydantic reads the value, mypy wants a literal
    kind: Literal["TritonModel"]
    metadata: ObjectMeta
    spec: TritonModelSpec
    status: TritonModelStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def model_name(self) -> str:
        """Triton's name for the model: spec.modelName, else the object's name."""
        return self.spec.model_name or self.metadata.name

    @property
    def server_name(self) -> str | None:
        """The TritonServer this model names: an inline server is a child named after the model; None for a
        model placed by its serverSelector."""
        if self.spec.server_selector is not None:
            return None
        return self.spec.server_ref.name if self.spec.server_ref else self.metadata.name


KINDS: dict[str, type[TritonServer] | type[TritonModel]] = {"TritonServer": TritonServer, "TritonModel": TritonModel}


def read_documents(text: str) -> list[dict[str, Any]]:
    """All non-empty YAML documents of a (multi-document) file."""
    return [document for document in yaml.safe_load_all(text) if document]


def is_custom_resource(document: dict[str, Any]) -> bool:
    return document.get("apiVersion") == API_VERSION and document.get("kind") in KINDS
