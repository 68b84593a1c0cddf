"""Custom resources and model configs that more than one test module (or benchmark) builds on."""

from __future__ import annotations

from typing import Any

from tests.support.fleet import EXAMPLE_BACKENDS
from tests.support.models import ADD_CONFIG, add_code

# A valid config with something to check in every part; tests change one field at a time.
BASE_CONFIG: dict[str, Any] = {
    "backend": "onnxruntime",
    "maxBatchSize": 8,
    "dynamicBatching": {"preferredBatchSize": [4, 8]},
    "input": [{"name": "x", "dataType": "TYPE_FP32", "dims": [3, 4]}],
    "output": [{"name": "y", "dataType": "TYPE_FP32", "dims": [3, 4]}],
    "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
}

# A batched python model whose input has a variable length: without allowRaggedBatch it is warned about.
VARIABLE_DIMS = {
    "backend": "python",
    "maxBatchSize": 16,
    "dynamicBatching": {"maxQueueDelayMicroseconds": 500000},
    "input": [{"name": "input_field", "dataType": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "out", "dataType": "TYPE_FP32", "dims": [1]}],
    "instanceGroup": [{"count": 1, "kind": "KIND_CPU"}],
}


def server_document(**spec: Any) -> dict[str, Any]:
    """A TritonServer named triton with this `spec`."""
    return {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonServer",
        "metadata": {"name": "triton", "namespace": "default"},
        "spec": spec,
    }


def model_document(config: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A TritonModel named m on the server triton, with `config` and any other `spec` fields."""
    return {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonModel",
        "metadata": {"name": "m", "namespace": "default"},
        "spec": {"serverRef": {"name": "triton"}, "config": config, **spec},
    }


# A server of two pods, its add model and the ConfigMap with the model's code: what the operator tests run.
SERVER = {
    "apiVersion": "triton-operator.io/v1alpha1",
    "kind": "TritonServer",
    "metadata": {"name": "triton"},
    "spec": {"replicas": 2, "backends": ["python"], "exitTimeoutSeconds": 5},
}
FILES = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "add-files"},
    "data": {"model.py": add_code().decode()},
}
MODEL = {
    "apiVersion": "triton-operator.io/v1alpha1",
    "kind": "TritonModel",
    "metadata": {"name": "add"},
    "spec": {
        "serverRef": {"name": "triton"},
        "config": ADD_CONFIG,
        "files": {"configMapRef": {"name": "add-files", "items": [{"key": "model.py", "path": "1/model.py"}]}},
    },
}

# A TritonServer file for the CLI, with GPUs for the GPU instance groups of Triton's own configs, the
# custom backends some of them use besides the full image's, and a repository their files load from.
GPU_SERVER_YAML = f"""\
apiVersion: triton-operator.io/v1alpha1
kind: TritonServer
metadata: {{name: triton}}
spec:
  gpus: {{count: 4}}
  backends: [{", ".join(EXAMPLE_BACKENDS)}]
  modelRepository: {{pvc: {{claimName: models}}}}
"""


def python_model_documents(name: str, config: dict[str, Any], code: bytes) -> list[dict[str, Any]]:
    """The ConfigMap `<name>-files` holding `code` and a TritonModel `name` on the server triton with
    `config`, loading that code as 1/model.py."""
    files = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-files"},
        "data": {"model.py": code.decode()},
    }
    model = {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonModel",
        "metadata": {"name": name},
        "spec": {
            "serverRef": {"name": "triton"},
            "config": config,
            "files": {"configMapRef": {"name": f"{name}-files", "items": [{"key": "model.py", "path": "1/model.py"}]}},
        },
    }
    return [files, model]
