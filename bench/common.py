"""What the benchmarks share: a local tritonserver with python models loaded through the sync."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]  # this clone's code, whichever clone the venv installed

from tests.support import models  # noqa: E402
from tests.support.ports import free_ports  # noqa: E402
from triton_operator.local.tritonserver import Ports  # noqa: E402
from triton_operator.protocol.desired import DesiredModel  # noqa: E402

MiB = 1 << 20
# A python model whose one FP32 input IN ([-1]) becomes OUT by `expression` (over `x`).
PYTHON_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.ascontiguousarray({expression}))]))
        return responses
"""


def model_config(**fields: object) -> dict[str, object]:
    """The config of every bench model (one CPU instance, FP32 IN -> OUT, any length), plus `fields`."""
    return {
        "backend": "python",
        "maxBatchSize": 0,
        "input": [{"name": "IN", "dataType": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUT", "dataType": "TYPE_FP32", "dims": [-1]}],
        "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
        **fields,
    }


def python_model(name: str, expression: str, **config_fields: object) -> DesiredModel:
    """`config_fields` are added to the config (e.g. parameters, to make a new revision)."""
    return models.python_model(
        name, model_config(**config_fields), textwrap.dedent(PYTHON_MODEL.format(expression=expression)).encode()
    )


load = models.load


def file_overrides(model: DesiredModel) -> dict[str, bytes]:
    """The model's files as the `files` of a load call straight to Triton."""
    return {f"file:{path}": content for path, content in model.files.items()}


def ports() -> Ports:
    return Ports(*free_ports(3))


def print_table(header: list[str], rows: list[list[object]]) -> None:
    """A Markdown table, as bench/RESULTS.md records it."""
    print("| " + " | ".join(header) + " |")
    print("| " + " | ".join("---" for _ in header) + " |")
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")


SCALED = "scaled"
# A python model whose answer shows which config its instance started with: OUT = IN x `factor`.
SCALED_CODE = """
import json
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.factor = float(json.loads(args["model_config"])["parameters"]["factor"]["string_value"])

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * self.factor)]
            )
            for r in requests
        ]
"""


def scaled_config(factor: int) -> dict[str, object]:
    return model_config(parameters={"factor": {"stringValue": str(factor)}})


def scaled_model(factor: int) -> DesiredModel:
    return models.python_model(SCALED, scaled_config(factor), SCALED_CODE.encode())
