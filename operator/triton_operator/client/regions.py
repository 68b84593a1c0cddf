"""Shared-memory regions (system or CUDA) and putting tensors into them and reading them back.

Everything goes through tritonclient's own shared-memory utilities and Triton's registration API,
so a region means the same thing to this client and to the server.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from multiprocessing import shared_memory as posix_shm
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import tritonclient.utils.shared_memory as system_shm
from tritonclient.utils import serialize_byte_tensor, triton_to_np_dtype

ALIGNMENT = 64
# The header that unlocks shared-memory registration on a server the operator runs: the value is in
# the server's `<server>-shm` Secret. The operator has the same name (protocol/names.py); this package
# imports nothing of the operator.
SHM_HEADER = "triton-shm-key"


def key_headers(client: Any, key: str | None) -> dict[str, str] | None:
    """The shared-memory key as `client` sends it: a header over HTTP, metadata with Triton's prefix over gRPC."""
    if key is None:
        return None
    grpc = type(client).__module__.startswith("tritonclient.grpc")
    return {f"triton-grpc-protocol-{SHM_HEADER}" if grpc else SHM_HEADER: key}


class RegionKind(Protocol):
    """What differs between system and CUDA shared memory."""

    def create(self, name: str, byte_size: int) -> Region: ...
    def destroy_all(self, regions: Iterable[Region]) -> None: ...
    def forget_local(self, name: str, key: str | None) -> None: ...
    def register(self, client: Any, region: Region, headers: dict[str, str] | None) -> Any: ...
    def register_function(self, client: Any) -> Any: ...
    def unregister(self, client: Any, name: str, headers: dict[str, str] | None) -> Any: ...
    def status(self, client: Any, headers: dict[str, str] | None) -> Any: ...
    def registered(self, status: Any) -> dict[str, str | None]: ...
    def write(self, region: Region, array: npt.NDArray[Any], offset: int) -> None: ...
    def read(self, region: Region, dtype: Any, shape: list[int], offset: int) -> npt.NDArray[Any]: ...


def _output_meta(output: Any) -> tuple[str, list[int]]:
    """Name, datatype and shape of an output, from a grpc (protobuf) or http (dict) response."""
    if isinstance(output, dict):
        return output["datatype"], list(output["shape"])
    return output.datatype, list(output.shape)


def _aligned(offset: int) -> int:
    return -(-offset // ALIGNMENT) * ALIGNMENT


@dataclass
class Region:
    """One registered region. Within a lease, `put` and `expect` lay tensors out one after another."""

    name: str
    byte_size: int
    handle: Any
    kind: RegionKind
    key: str | None = None
    _cursor: int = 0
    _outputs: dict[str, int] = field(default_factory=dict)

    def reset(self) -> None:
        self._cursor = 0
        self._outputs.clear()

    def _reserve(self, byte_size: int, what: str) -> int:
        offset = _aligned(self._cursor)
        if offset + byte_size > self.byte_size:
            raise ValueError(
                f"{what} needs {byte_size} bytes at offset {offset}, beyond region '{self.name}' of "
                f"{self.byte_size} bytes: raise the pool's region_bytes (and clientPool.regionBytes)"
            )
        self._cursor = offset + byte_size
        return offset

    def put(self, infer_input: Any, array: npt.NDArray[Any]) -> int:
        """Copy `array` into the region and point `infer_input` (http, grpc or aio) at it."""
        data = serialize_byte_tensor(array) if array.dtype == np.object_ else np.ascontiguousarray(array)
        byte_size = len(data.item()) if data.dtype == np.object_ else data.nbytes
        offset = self._reserve(byte_size, f"input '{infer_input.name()}'")
        self.kind.write(self, data, offset)
        infer_input.set_shared_memory(self.name, byte_size, offset)
        return offset

    def expect(self, requested_output: Any, byte_size: int) -> int:
        """Have Triton write `requested_output` into the region; `byte_size` is its largest size."""
        offset = self._reserve(byte_size, f"output '{requested_output.name()}'")
        requested_output.set_shared_memory(self.name, byte_size, offset)
        self._outputs[requested_output.name()] = offset
        return offset

    def read(self, output_name: str, result: Any, copy: bool = True) -> npt.NDArray[Any]:
        """The output Triton wrote: a copy by default, or a view into the region (valid while leased)."""
        datatype, shape = _output_meta(result.get_output(output_name))
        dtype = np.object_ if datatype == "BYTES" else triton_to_np_dtype(datatype)
        array = self.kind.read(self, dtype, shape, self._outputs[output_name])
        return array.copy() if copy else array


class SystemRegions:
    """POSIX shared memory (/dev/shm), shared with Triton by key."""

    def create(self, name: str, byte_size: int) -> Region:
        key = f"/{name}"
        handle = system_shm.create_shared_memory_region(name, key, byte_size, create_only=True)
        return Region(name, byte_size, handle, self, key=key)

    def destroy_all(self, regions: Iterable[Region]) -> None:
        for region in regions:
            with contextlib.suppress(Exception):
                system_shm.destroy_shared_memory_region(region.handle)

    def forget_local(self, name: str, key: str | None) -> None:
        """Unlink a region another (crashed) process created; tritonclient only unlinks its own."""
        with contextlib.suppress(FileNotFoundError):
            stale = posix_shm.SharedMemory(key or f"/{name}")
            stale.close()
            stale.unlink()

    def register(self, client: Any, region: Region, headers: dict[str, str] | None) -> Any:
        return client.register_system_shared_memory(region.name, region.key, region.byte_size, headers=headers)

    def register_function(self, client: Any) -> Any:
        return client.register_system_shared_memory

    def unregister(self, client: Any, name: str, headers: dict[str, str] | None) -> Any:
        return client.unregister_system_shared_memory(name, headers=headers)

    def status(self, client: Any, headers: dict[str, str] | None) -> Any:
        return client.get_system_shared_memory_status(headers=headers)

    def registered(self, status: Any) -> dict[str, str | None]:
        if isinstance(status, list):  # http
            return {entry["name"]: entry.get("key") for entry in status}
        return {name: entry.key for name, entry in status.regions.items()}

    def write(self, region: Region, array: npt.NDArray[Any], offset: int) -> None:
        system_shm.set_shared_memory_region(region.handle, [array], offset)

    def read(self, region: Region, dtype: Any, shape: list[int], offset: int) -> npt.NDArray[Any]:
        contents: npt.NDArray[Any] = system_shm.get_contents_as_numpy(region.handle, dtype, shape, offset)
        return contents


class CudaRegions:
    """CUDA shared memory on one GPU, shared with Triton by IPC handle. Needs tritonclient[cuda] and a GPU.

    tritonclient creates, registers and frees the regions; it writes and reads only from a region's start,
    so tensors at an offset (several in one region, as with system shared memory) are copied here through
    the CUDA runtime tritonclient itself uses."""

    def __init__(self, device_id: int = 0, cuda_shm: Any = None):
        if cuda_shm is None:
            import tritonclient.utils.cuda_shared_memory  # fails clearly without cuda-python

            cuda_shm = tritonclient.utils.cuda_shared_memory

        self.device_id = device_id
        self._cuda = cuda_shm

    def create(self, name: str, byte_size: int) -> Region:
        return Region(name, byte_size, self._cuda.create_shared_memory_region(name, byte_size, self.device_id), self)

    def destroy_all(self, regions: Iterable[Region]) -> None:
        for region in regions:
            with contextlib.suppress(Exception):
                self._cuda.destroy_shared_memory_region(region.handle)

    def forget_local(self, name: str, key: str | None) -> None:
        """Nothing to do: the driver frees a dead process's device memory."""

    def register(self, client: Any, region: Region, headers: dict[str, str] | None) -> Any:
        raw = self._cuda.get_raw_handle(region.handle)
        return client.register_cuda_shared_memory(region.name, raw, self.device_id, region.byte_size, headers=headers)

    def register_function(self, client: Any) -> Any:
        return client.register_cuda_shared_memory

    def unregister(self, client: Any, name: str, headers: dict[str, str] | None) -> Any:
        return client.unregister_cuda_shared_memory(name, headers=headers)

    def status(self, client: Any, headers: dict[str, str] | None) -> Any:
        return client.get_cuda_shared_memory_status(headers=headers)

    def registered(self, status: Any) -> dict[str, str | None]:
        if isinstance(status, list):
            return {entry["name"]: None for entry in status}
        return {name: None for name in status.regions}

    def _copy(self, destination: int, source: int, byte_size: int) -> None:
        """A blocking copy either way between host and device memory (unified addressing tells which)."""
        runtime = self._cuda.cudart
        self._cuda.call_cuda_function(
            runtime.cudaMemcpy, destination, source, byte_size, runtime.cudaMemcpyKind.cudaMemcpyDefault
        )

    def write(self, region: Region, array: npt.NDArray[Any], offset: int) -> None:
        host = np.frombuffer(array.item(), np.uint8) if array.dtype == np.object_ else np.ascontiguousarray(array)
        self._copy(int(region.handle._base_addr) + offset, host.ctypes.data, host.nbytes)

    def read(self, region: Region, dtype: Any, shape: list[int], offset: int) -> npt.NDArray[Any]:
        if dtype == np.object_:  # length-prefixed strings: their size shows only as they are read
            host = np.empty(region.byte_size - offset, np.uint8)
            self._copy(host.ctypes.data, int(region.handle._base_addr) + offset, host.nbytes)
            return _strings(host.tobytes(), shape)
        array = np.empty(shape, dtype)
        self._copy(array.ctypes.data, int(region.handle._base_addr) + offset, array.nbytes)
        return array


def _strings(buffer: bytes, shape: list[int]) -> npt.NDArray[Any]:
    """A BYTES tensor of `shape` from the front of `buffer`, each element a 4-byte little-endian length and
    its bytes."""
    items, at = [], 0
    for _ in range(int(np.prod(shape))):
        (length,) = struct.unpack_from("<I", buffer, at)
        items.append(buffer[at + 4 : at + 4 + length])
        at += 4 + length
    return np.array(items, dtype=np.object_).reshape(shape)
