"""Python models whose config comes from `auto_complete_config` in model.py, as in python_backend's
examples/auto_complete: batch_auto_complete sets its inputs, outputs, max_batch_size 4 and dynamic
batching; nobatch_auto_complete the same inputs and outputs with max_batch_size 0. Both answer
OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1. A third model's auto_complete_config raises."""

from __future__ import annotations

from pathlib import Path

TENSORS = """\
        inputs = [
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]},
        ]
        outputs = [
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]},
        ]
        config = auto_complete_model_config.as_dict()
        input_names = [tensor["name"] for tensor in config["input"]]
        output_names = [tensor["name"] for tensor in config["output"]]
        for tensor in inputs:
            if tensor["name"] not in input_names:
                auto_complete_model_config.add_input(tensor)
        for tensor in outputs:
            if tensor["name"] not in output_names:
                auto_complete_model_config.add_output(tensor)
"""
EXECUTE = """
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dtypes = [
            pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(config, name)["data_type"])
            for name in ("OUTPUT0", "OUTPUT1")
        ]

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [
                pb_utils.Tensor("OUTPUT0", (a + b).astype(self.dtypes[0])),
                pb_utils.Tensor("OUTPUT1", (a - b).astype(self.dtypes[1])),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""


def _model(batching: str) -> str:
    return (
        "import json\n\nimport triton_python_backend_utils as pb_utils\n\n\nclass TritonPythonModel:\n"
        "    @staticmethod\n    def auto_complete_config(auto_complete_model_config):\n"
        f"{TENSORS}{batching}        return auto_complete_model_config\n{EXECUTE}"
    )


BATCH_MODEL = _model(
    "        auto_complete_model_config.set_max_batch_size(4)\n"
    "        auto_complete_model_config.set_dynamic_batching()\n"
)
NOBATCH_MODEL = _model("        auto_complete_model_config.set_max_batch_size(0)\n")
BROKEN_MODEL = (
    "class TritonPythonModel:\n    @staticmethod\n    def auto_complete_config(auto_complete_model_config):\n"
    '        raise ValueError("the tokenizer folder is missing")\n\n'
    "    def execute(self, requests):\n        return []\n"
)
# What the example's client expects of each model's completed config.
EXPECTED_MAX_BATCH_SIZE = {"batch_auto_complete": 4, "nobatch_auto_complete": 0}
# A partial config: the backend and an instance group, nothing about tensors.
PARTIAL_CONFIG = 'backend: "python"\ninstance_group [{ count: 2 kind: KIND_CPU }]\n'


def write_auto_complete_repository(root: Path, partial: bool = False) -> Path:
    """The example's two models with no config.pbtxt, or nobatch_auto_complete with PARTIAL_CONFIG."""
    for name, code in (("batch_auto_complete", BATCH_MODEL), ("nobatch_auto_complete", NOBATCH_MODEL)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(code)
    if partial:
        (root / "nobatch_auto_complete" / "config.pbtxt").write_text(PARTIAL_CONFIG)
    return root
