"""The CUDA region kind writes and reads tensors at any offset of a region, through the CUDA runtime call
tritonclient uses, tested on any machine against a stand-in with tritonclient's own signatures (the real
thing runs in the `gpu` tests)."""

from __future__ import annotations

import ast
import ctypes
import inspect
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient
import tritonclient.grpc as grpcclient

from tests.support.cuda_standin import CudaSharedMemoryStandIn
from triton_operator.client.regions import ALIGNMENT, CudaRegions

TRITONCLIENT_CUDA = Path(tritonclient.__file__).parent / "utils" / "cuda_shared_memory" / "__init__.py"


def test_the_stand_in_has_tritonclients_signatures() -> None:
    """tritonclient's module needs cuda-python to import, so its source is read instead."""
    real = {
        node.name: [arg.arg for arg in node.args.args]
        for node in ast.parse(TRITONCLIENT_CUDA.read_text()).body
        if isinstance(node, ast.FunctionDef)
    }
    standin = CudaSharedMemoryStandIn()
    used = [
        "create_shared_memory_region",
        "get_raw_handle",
        "set_shared_memory_region",
        "get_contents_as_numpy",
        "destroy_shared_memory_region",
    ]
    for name in used:
        assert list(inspect.signature(getattr(standin, name)).parameters) == real[name], name
    assert "call_cuda_function" in TRITONCLIENT_CUDA.read_text() and "cudart" in TRITONCLIENT_CUDA.read_text()


def _device_bytes(region: Any, offset: int, size: int) -> bytes:
    return ctypes.string_at(region.handle._base_addr + offset, size)


class _Result:
    """What Region.read asks of an infer result: the output's datatype and shape."""

    def __init__(self, outputs: dict[str, tuple[str, list[int]]]):
        self.outputs = outputs

    def get_output(self, name: str) -> dict[str, Any]:
        datatype, shape = self.outputs[name]
        return {"datatype": datatype, "shape": shape}


def test_tensors_go_in_one_after_another_and_come_back_from_their_offsets() -> None:
    cuda = CudaSharedMemoryStandIn()
    kind = CudaRegions(device_id=0, cuda_shm=cuda)
    region = kind.create("requests", 4096)
    first, second = np.arange(5, dtype=np.float32), np.arange(3, dtype=np.int64) + 7
    assert region.put(grpcclient.InferInput("A", [5], "FP32"), first) == 0
    assert region.put(grpcclient.InferInput("B", [3], "INT64"), second) == ALIGNMENT  # 20 bytes, then aligned
    assert _device_bytes(region, 0, 20) == first.tobytes()
    assert _device_bytes(region, ALIGNMENT, 24) == second.tobytes()

    words = np.array([b"a", b"longer one", b""], dtype=np.object_)
    assert region.put(grpcclient.InferInput("C", [3], "BYTES"), words) == 2 * ALIGNMENT

    out = region.expect(grpcclient.InferRequestedOutput("OUT"), 4 * 8)
    assert out == 3 * ALIGNMENT
    answer = np.array([[1.5, -2.0], [3.25, 4.0]])
    ctypes.memmove(region.handle._base_addr + out, answer.ctypes.data, answer.nbytes)  # as Triton writes it
    said = region.read("OUT", _Result({"OUT": ("FP64", [2, 2])}))
    assert said.tolist() == answer.tolist() and said.dtype == np.float64

    texts = region.expect(grpcclient.InferRequestedOutput("TEXT"), 64)
    encoded = b"".join(len(word).to_bytes(4, "little") + word for word in words)
    ctypes.memmove(region.handle._base_addr + texts, encoded, len(encoded))
    assert region.read("TEXT", _Result({"TEXT": ("BYTES", [3])})).tolist() == words.tolist()

    kind.destroy_all([region])
    assert cuda.allocated == []
