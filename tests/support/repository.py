"""A Triton model repository in the shapes Triton's python_backend examples take, written by the tests:
what a new user brings to `triton-operator import`."""

from __future__ import annotations

import random
from pathlib import Path

# add_sub (python_backend/examples/add_sub): two inputs, their sum and difference.
ADD_SUB_CONFIG = """\
name: "add_sub"
backend: "python"
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }]
instance_group [{ kind: KIND_CPU }]
"""
ADD_SUB_CODE = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [
                pb_utils.Tensor("OUTPUT0", (a + b).astype(np.float32)),
                pb_utils.Tensor("OUTPUT1", (a - b).astype(np.float32)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""

# decoupled/square (python_backend/examples/decoupled): IN responses of IN for each request, on a stream.
SQUARE_CONFIG = """\
name: "square_int32"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: True }
input [{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }]
instance_group [{ count: 1 kind: KIND_CPU }]
"""
# The same config as a TritonModel's spec.config.
SQUARE_SPEC_CONFIG = {
    "backend": "python",
    "modelTransactionPolicy": {"decoupled": True},
    "input": [{"name": "IN", "dataType": "TYPE_INT32", "dims": [1]}],
    "output": [{"name": "OUT", "dataType": "TYPE_INT32", "dims": [1]}],
    "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
}
SQUARE_CODE = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0]
            sender = request.get_response_sender()
            for _ in range(count):
                out = pb_utils.Tensor("OUT", np.array([count], np.int32))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

# custom_metrics (python_backend/examples/custom_metrics): add_sub that counts its work in a metric of its own.
CUSTOM_METRICS_CONFIG = ADD_SUB_CONFIG.replace('"add_sub"', '"custom_metrics"')
CUSTOM_METRICS_CODE = (
    ADD_SUB_CODE.replace("import numpy as np", "import time\n\nimport numpy as np")
    .replace(
        "    def execute(self, requests):\n",
        """    def initialize(self, args):
        self.family = pb_utils.MetricFamily(
            name="requests_process_latency_ns",
            description="Cumulative time spent processing requests",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.latency = self.family.Metric(labels={"model": args["model_name"], "version": args["model_version"]})

    def execute(self, requests):
        start = time.perf_counter_ns()
""",
    )
    .replace(
        "        return responses\n",
        "        self.latency.increment(time.perf_counter_ns() - start)\n        return responses\n",
    )
)

# A model with a file beside its model.py: labels it answers with.
LABELS_CONFIG = """\
name: "labels"
backend: "python"
input [{ name: "INDEX" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "LABEL" data_type: TYPE_STRING dims: [ 1 ] }]
instance_group [{ kind: KIND_CPU }]
"""
LABELS_CODE = """\
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.labels = (Path(__file__).parent / "labels.txt").read_text().splitlines()

    def execute(self, requests):
        responses = []
        for request in requests:
            index = pb_utils.get_input_tensor_by_name(request, "INDEX").as_numpy()[0]
            label = np.array([self.labels[index].encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("LABEL", label)]))
        return responses
"""
LABELS = "cat\ndog\nheron\n"

# An ensemble over two of them: add_sub, then custom_metrics on its sum and difference (2a, 2b).
ENSEMBLE_CONFIG = """\
name: "add_sub_twice"
platform: "ensemble"
input [{ name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "TWICE_A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "TWICE_B" data_type: TYPE_FP32 dims: [ 4 ] }]
ensemble_scheduling {
  step [
    { model_name: "add_sub" model_version: -1
      input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
      output_map { key: "OUTPUT0" value: "sum" } output_map { key: "OUTPUT1" value: "difference" } },
    { model_name: "custom_metrics" model_version: -1
      input_map { key: "INPUT0" value: "sum" } input_map { key: "INPUT1" value: "difference" }
      output_map { key: "OUTPUT0" value: "TWICE_A" } output_map { key: "OUTPUT1" value: "TWICE_B" } }
  ]
}
"""

# Weights too big for a ConfigMap: the model loads them from the server's modelRepository.
WEIGHTS_BYTES = 2 << 20
BIG_CONFIG = """\
name: "big_weights"
backend: "python"
input [{ name: "INDEX" data_type: TYPE_INT64 dims: [ 1 ] }]
output [{ name: "SIZE" data_type: TYPE_INT64 dims: [ 1 ] }, { name: "BYTE" data_type: TYPE_INT64 dims: [ 1 ] }]
instance_group [{ kind: KIND_CPU }]
"""
BIG_CODE = """\
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.weights = (Path(__file__).parent / "weights.bin").read_bytes()

    def execute(self, requests):
        responses = []
        for request in requests:
            index = int(pb_utils.get_input_tensor_by_name(request, "INDEX").as_numpy()[0])
            outputs = [
                pb_utils.Tensor("SIZE", np.array([len(self.weights)], np.int64)),
                pb_utils.Tensor("BYTE", np.array([self.weights[index]], np.int64)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""


def weights() -> bytes:
    """The big model's weights: the same bytes on every run."""
    return random.Random(18).randbytes(WEIGHTS_BYTES)


def write_repository(root: Path) -> Path:
    """The repository: each model's folder with its config.pbtxt and version folder."""
    models = {
        "add_sub": (ADD_SUB_CONFIG, {"1/model.py": ADD_SUB_CODE}),
        "square_int32": (SQUARE_CONFIG, {"1/model.py": SQUARE_CODE}),
        "custom_metrics": (CUSTOM_METRICS_CONFIG, {"1/model.py": CUSTOM_METRICS_CODE}),
        "labels": (LABELS_CONFIG, {"1/model.py": LABELS_CODE, "1/labels.txt": LABELS}),
        "add_sub_twice": (ENSEMBLE_CONFIG, {}),
        "big_weights": (BIG_CONFIG, {"1/model.py": BIG_CODE, "1/weights.bin": weights()}),
    }
    for name, (config, files) in models.items():
        folder = root / name
        (folder / "1").mkdir(parents=True)
        (folder / "config.pbtxt").write_text(config)
        for path, content in files.items():
            (folder / path).write_bytes(content if isinstance(content, bytes) else content.encode())
    return root
