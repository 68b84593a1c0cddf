"""A stand-in for tritonclient.utils.cuda_shared_memory where no GPU is: the same functions with the same
signatures (tests/client/test_cuda_regions.py checks them against tritonclient's source), over host memory that
plays device memory, so the CUDA region kind's offset arithmetic is tested on any machine."""

from __future__ import annotations

import ctypes
import enum
from typing import Any


class _Error(enum.Enum):
    cudaSuccess = 0


class _MemcpyKind(enum.Enum):
    cudaMemcpyDefault = 4


class _Runtime:
    """The one runtime call the region kind makes: cudaMemcpy(dst, src, count, kind) -> (error,)."""

    cudaError_t = _Error
    cudaMemcpyKind = _MemcpyKind

    def __init__(self) -> None:
        self.copies: list[tuple[int, int, int]] = []

    def cudaMemcpy(self, dst: int, src: int, count: int, kind: _MemcpyKind) -> tuple[_Error]:
        assert kind is _MemcpyKind.cudaMemcpyDefault
        ctypes.memmove(dst, src, count)
        self.copies.append((dst, src, count))
        return (_Error.cudaSuccess,)


class CudaSharedMemoryRegion:
    def __init__(self, triton_shm_name: str, byte_size: int, device_id: int) -> None:
        self._triton_shm_name = triton_shm_name
        self.memory = (ctypes.c_char * byte_size)()
        self._base_addr = ctypes.addressof(self.memory)
        self._byte_size = byte_size
        self._device_id = device_id


class CudaSharedMemoryStandIn:
    """The module's functions; `allocated` and `cudart.copies` show what was done."""

    def __init__(self) -> None:
        self.cudart = _Runtime()
        self.allocated: list[CudaSharedMemoryRegion] = []

    def call_cuda_function(self, function: Any, *argv: Any) -> Any:
        result = function(*argv)
        if result[0] is not _Error.cudaSuccess:
            raise RuntimeError(result[0])
        return result[1:] if len(result) > 2 else (result[1] if len(result) > 1 else None)

    def create_shared_memory_region(
        self, triton_shm_name: str, byte_size: int, device_id: int
    ) -> CudaSharedMemoryRegion:
        region = CudaSharedMemoryRegion(triton_shm_name, byte_size, device_id)
        self.allocated.append(region)
        return region

    def get_raw_handle(self, cuda_shm_handle: CudaSharedMemoryRegion) -> bytes:
        return cuda_shm_handle._triton_shm_name.encode()

    def set_shared_memory_region(self, cuda_shm_handle: CudaSharedMemoryRegion, input_values: list[Any]) -> None:
        raise AssertionError("writes only from the region's start: the region kind must not use it")

    def get_contents_as_numpy(self, cuda_shm_handle: CudaSharedMemoryRegion, datatype: Any, shape: list[int]) -> Any:
        raise AssertionError("reads only from the region's start: the region kind must not use it")

    def destroy_shared_memory_region(self, cuda_shm_handle: CudaSharedMemoryRegion) -> None:
        self.allocated.remove(cuda_shm_handle)
