"""A varied fleet of TritonModels, the same for a given size: the render benchmark's input and part of
the golden output that guards rendering against unintended change."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from triton_operator.api.config_json import ModelConfig, config_to_dict
from triton_operator.api.types import API_VERSION

TRITON_EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "triton_examples"
# Triton's own failure-case configs and an outdated example that validation refuses (tests/cli/test_cli.py).
REFUSED_EXAMPLES = (
    "batch_input_many_source0",
    "batch_output_unknown_target",
    "preserve_ordering0",
    "simple_dyna_sequence",
)
# The backends Triton's example configs use: the full image's and the custom ones of some examples.
EXAMPLE_BACKENDS = [
    "dali",
    "diffusion",
    "fil",
    "identity",
    "implicit_state",
    "iterative_sequence",
    "onnxruntime",
    "openvino",
    "python",
    "pytorch",
    "repeat",
    "square",
    "tensorflow",
    "tensorrt",
]
SERVERS: list[dict[str, Any]] = [
    {
        "apiVersion": API_VERSION,
        "kind": "TritonServer",
        "metadata": {"name": "cpu"},
        "spec": {
            "replicas": 2,
            "backends": ["python", "onnxruntime", "pytorch", "openvino", "fil"],
            "sharedMemory": {"sizeLimit": "auto"},
        },
    },
    {
        "apiVersion": API_VERSION,
        "kind": "TritonServer",
        "metadata": {"name": "gpu"},
        "spec": {
            "gpus": {"count": 4},
            "backends": EXAMPLE_BACKENDS,
            "modelRepository": {"uri": "s3://models/gpu"},  # the examples' weights: far more than ConfigMaps hold
            "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "16Gi"}},
        },
    },
]
MODEL_CODE = (
    "import triton_python_backend_utils as pb_utils\n\n\n"
    "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
)


def _example_configs() -> list[dict[str, Any]]:
    """Triton's example configs that validate, as spec.config (without their names)."""
    configs = []
    for path in sorted(TRITON_EXAMPLES.glob("*.pbtxt")):
        if any(refused in path.name for refused in REFUSED_EXAMPLES):
            continue
        config = text_format.Parse(path.read_text(), ModelConfig())
        config.ClearField("name")
        configs.append(config_to_dict(config))
    return configs


def _python_config(index: int) -> dict[str, Any]:
    """A python model: batching kind, instance kind and GPUs vary with the index."""
    batch = 1 + index % 16
    config: dict[str, Any] = {
        "backend": "python",
        "maxBatchSize": batch if index % 4 else 0,
        "input": [{"name": "IN", "dataType": "TYPE_FP32", "dims": [16 + index % 64]}],
        "output": [{"name": "OUT", "dataType": "TYPE_FP32", "dims": [16 + index % 64]}],
        "instanceGroup": [{"kind": "KIND_CPU", "count": 1 + index % 3}],
    }
    if index % 4 == 1:
        config["dynamicBatching"] = {"maxQueueDelayMicroseconds": 100 * index, "preferredBatchSize": [batch]}
    elif index % 4 == 2:
        config["sequenceBatching"] = {
            "maxSequenceIdleMicroseconds": 1_000_000 + index,
            "oldest": {"maxCandidateSequences": 4},
        }
    return config


def _gpu_config(config: dict[str, Any], index: int) -> dict[str, Any]:
    """The config with its instances on one or two of the server's four GPUs."""
    config = copy.deepcopy(config)
    if config.get("platform") != "ensemble":
        config["instanceGroup"] = [
            {"kind": "KIND_GPU", "count": 1 + index % 2, "gpus": sorted({index % 4, (index + 1 + index % 2) % 4})}
        ]
    return config


def varied_fleet(count: int) -> list[dict[str, Any]]:
    """Two servers, `count` TritonModels and the ConfigMaps of their files: Triton's examples (every
    backend, batching kind and ensemble in tests/data) on the GPU server with GPU groups, python
    models with files on the CPU server, and every tenth model on a dedicated server of its own."""
    examples = _example_configs()
    documents = copy.deepcopy(SERVERS)
    for index in range(count):
        name = f"model-{index:04d}"
        spec: dict[str, Any] = {"modelName": name.replace("-", "_")}
        if index % 2:
            spec["serverRef"] = {"name": "gpu"}
            spec["config"] = _gpu_config(examples[index // 2 % len(examples)], index)
        else:
            spec["serverRef"] = {"name": "cpu"}
            spec["config"] = _python_config(index)
            spec["files"] = {
                "configMapRef": {"name": f"{name}-files", "items": [{"key": "model.py", "path": "1/model.py"}]}
            }
            documents.append(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"{name}-files"},
                    "data": {"model.py": MODEL_CODE + f"# {index}\n"},
                }
            )
        if index % 10 == 0:
            spec["server"] = {"replicas": 1, "backends": ["python"]}
            del spec["serverRef"]
        documents.append({"apiVersion": API_VERSION, "kind": "TritonModel", "metadata": {"name": name}, "spec": spec})
    return documents
