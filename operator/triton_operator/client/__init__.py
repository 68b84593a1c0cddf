"""Clients' helpers, importable without the operator: a pool of Triton shared-memory regions."""

from .pool import Lease, PoolExhausted, SharedMemoryPool
from .regions import CudaRegions, Region, SystemRegions

__all__ = ["CudaRegions", "Lease", "PoolExhausted", "Region", "SharedMemoryPool", "SystemRegions"]
