"""Python models as the sync loads them, for tests and benchmarks on a local tritonserver."""

from __future__ import annotations

import asyncio
import textwrap
from typing import Any

from triton_operator.api.resources import TritonModel
from triton_operator.local.tritonserver import LocalTriton
from triton_operator.render.config import build_model_config, desired_model
from triton_operator.triton.client import ControlClient
from triton_operator.protocol.desired import DesiredModel
from triton_operator.triton.sync import Replica

# model.py of a python model that answers OUT = 2 * IN, whatever the shape.
DOUBLING_CODE = textwrap.dedent(
    """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)])
                    for r in requests]
    """
).encode()


def python_model(name: str, config: dict[str, Any], code: bytes) -> DesiredModel:
    """A TritonModel named `name` with `config` and `code` as 1/model.py, rendered for the sync."""
    document = {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonModel",
        "metadata": {"name": name.replace("_", "-")},
        "spec": {"serverRef": {"name": "triton"}, "modelName": name, "config": config},
    }
    files = {"1/model.py": code}
    return desired_model(build_model_config(TritonModel.model_validate(document), files), files)


def load(triton: LocalTriton, *models: DesiredModel, control_key: str | None = None) -> None:
    """Sync the models onto the server; they must all load."""

    async def sync() -> None:
        async with ControlClient(triton.grpc_url, control_key) as client:
            report = await Replica(client).sync({model.name: model for model in models})
            assert report.ok, report

    asyncio.run(sync())
