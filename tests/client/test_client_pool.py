"""The client shared-memory pool against a real tritonserver: leases under concurrency, errors and
cancellation, reclaiming a crashed owner's regions, and nothing left behind after close()."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient

from tests.support.models import DOUBLING_CODE, load, python_model
from tests.support.ports import free_ports
from triton_operator.api.server import TritonServerSpec
from triton_operator.client import PoolExhausted, Region, SharedMemoryPool
from triton_operator.local.tritonserver import LocalTriton, Ports

SHM = Path("/dev/shm")
CONFIG = {
    "backend": "python",
    "maxBatchSize": 0,
    "input": [{"name": "IN", "dataType": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUT", "dataType": "TYPE_FP32", "dims": [-1]}],
    "instanceGroup": [{"kind": "KIND_CPU", "count": 2}],
}


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTriton]:
    server = LocalTriton(
        TritonServerSpec.model_validate({"exitTimeoutSeconds": 5}),
        tmp_path_factory.mktemp("pool"),
        Ports(*free_ports(3)),
    )
    with server:
        load(server, python_model("double", CONFIG, DOUBLING_CODE))
        yield server


def registered(triton: LocalTriton, prefix: str) -> list[str]:
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    try:
        return sorted(name for name in client.get_system_shared_memory_status().regions if name.startswith(prefix))
    finally:
        client.close()


def on_host(prefix: str) -> list[str]:
    return sorted(name for name in os.listdir(SHM) if name.startswith(prefix))


def _double_through(region: Region, module: Any, values: np.ndarray) -> tuple[Any, Any]:
    infer_input = module.InferInput("IN", list(values.shape), "FP32")
    region.put(infer_input, values)
    output = module.InferRequestedOutput("OUT")
    region.expect(output, values.nbytes)
    return infer_input, output


@pytest.mark.triton
def test_open_registers_and_close_leaves_nothing(triton: LocalTriton) -> None:
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    pool = SharedMemoryPool(client, regions=3, region_bytes=1 << 20, prefix="lifecycle")
    assert registered(triton, "lifecycle") == [] and on_host("lifecycle") == []
    with pool:
        assert registered(triton, "lifecycle") == ["lifecycle_0", "lifecycle_1", "lifecycle_2"]
        assert on_host("lifecycle") == ["lifecycle_0", "lifecycle_1", "lifecycle_2"]
    assert registered(triton, "lifecycle") == []
    assert on_host("lifecycle") == []
    client.close()


@pytest.mark.triton
@pytest.mark.parametrize("driven", ["sync", "async"])
def test_close_waits_out_a_region_triton_still_holds(
    triton: LocalTriton, monkeypatch: pytest.MonkeyPatch, driven: str
) -> None:
    """Triton refuses to unregister a region for a moment after answering with it; close() waits
    that out, and any other refusal still fails the close."""
    prefix = f"held_{driven}"
    refusals = {f"{prefix}_0": 2}  # the first region is "in use" twice

    def pool_of(client: Any) -> SharedMemoryPool:
        pool = SharedMemoryPool(client, regions=2, region_bytes=1 << 20, prefix=prefix)
        unregister = pool.kind.unregister

        def busy_at_first(client_: Any, name: str, headers: Any) -> Any:
            if refusals.get(name):
                refusals[name] -= 1
                raise RuntimeError(f"Cannot unregister shared memory region '{name}', it is currently in use")
            return unregister(client_, name, headers)

        monkeypatch.setattr(pool.kind, "unregister", busy_at_first)
        return pool

    async def run_async() -> None:
        client = grpcaio.InferenceServerClient(triton.grpc_url)
        async with pool_of(client):
            pass
        await client.close()

    if driven == "async":
        asyncio.run(run_async())
    else:
        client = grpcclient.InferenceServerClient(triton.grpc_url)
        with pool_of(client):
            pass
        client.close()
    assert refusals == {f"{prefix}_0": 0} and registered(triton, prefix) == [] and on_host(prefix) == []


@pytest.mark.triton
def test_many_concurrent_async_leases_infer_correctly(triton: LocalTriton) -> None:
    in_use: set[str] = set()
    overlaps: list[str] = []

    async def main() -> list[bool]:
        async with grpcaio.InferenceServerClient(triton.grpc_url) as client:
            async with SharedMemoryPool(client, regions=4, region_bytes=1 << 20, prefix="async") as pool:

                async def one(index: int) -> bool:
                    values = np.full(1000 + index, index, dtype=np.float32)
                    async with pool.lease() as region:
                        if region.name in in_use:
                            overlaps.append(region.name)
                        in_use.add(region.name)
                        try:
                            infer_input, output = _double_through(region, grpcaio, values)
                            result = await client.infer("double", [infer_input], outputs=[output])
                            return bool(np.array_equal(region.read("OUT", result), values * 2))
                        finally:
                            in_use.discard(region.name)

                results = await asyncio.gather(*(one(i) for i in range(64)))
                assert pool.available == 4
                return results

    assert all(asyncio.run(main()))
    assert overlaps == [], "a region was leased to two users at once"
    assert registered(triton, "async") == [] and on_host("async") == []


@pytest.mark.triton
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_threads_share_a_pool_with_sync_clients(triton: LocalTriton, protocol: str) -> None:
    module = grpcclient if protocol == "grpc" else httpclient
    url = triton.grpc_url if protocol == "grpc" else triton.http_url.removeprefix("http://")
    client = module.InferenceServerClient(url)
    lock = threading.Lock()
    in_use: set[str] = set()
    per_thread = threading.local()  # tritonclient.http's client is gevent-based: one per thread

    def one(index: int) -> bool:
        if not hasattr(per_thread, "client"):
            per_thread.client = module.InferenceServerClient(url)
        values = np.arange(index, index + 512, dtype=np.float32)
        with pool.lease() as region:
            with lock:
                assert region.name not in in_use
                in_use.add(region.name)
            try:
                infer_input, output = _double_through(region, module, values)
                result = per_thread.client.infer("double", [infer_input], outputs=[output])
                return bool(np.array_equal(region.read("OUT", result), values * 2))
            finally:
                with lock:
                    in_use.discard(region.name)

    with SharedMemoryPool(client, regions=3, region_bytes=1 << 16, prefix=f"threads-{protocol}") as pool:
        with ThreadPoolExecutor(8) as executor:
            assert all(executor.map(one, range(48)))
    assert registered(triton, f"threads-{protocol}") == []
    client.close()


@pytest.mark.triton
def test_a_full_pool_times_out_with_advice(triton: LocalTriton) -> None:
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    with SharedMemoryPool(client, regions=1, region_bytes=4096, prefix="full") as pool:
        with pool.lease():
            with pytest.raises(PoolExhausted, match="add regions"), pool.lease(timeout=0.2):
                pass

            async def wait() -> None:
                async with pool.lease(timeout=0.2):
                    pass

            with pytest.raises(PoolExhausted):
                asyncio.run(wait())
        assert pool.available == 1
    client.close()


@pytest.mark.triton
def test_exceptions_and_cancellation_return_leases(triton: LocalTriton) -> None:
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    with SharedMemoryPool(client, regions=2, region_bytes=4096, prefix="returns") as pool:
        with pytest.raises(RuntimeError), pool.lease():
            raise RuntimeError("the caller failed")
        assert pool.available == 2

        async def main() -> None:
            holding = asyncio.Event()

            async def hold_forever() -> None:
                async with pool.lease():
                    holding.set()
                    await asyncio.sleep(3600)

            holders = [asyncio.create_task(hold_forever()) for _ in range(2)]
            await holding.wait()
            await asyncio.sleep(0.05)
            assert pool.available == 0
            waiter = asyncio.create_task(hold_forever())  # waits: the pool is empty
            await asyncio.sleep(0.05)
            waiter.cancel()
            for task in holders:
                task.cancel()
            await asyncio.gather(*holders, waiter, return_exceptions=True)
            async with pool.lease(timeout=1) as region:
                assert region.name.startswith("returns_")

        asyncio.run(main())
        assert pool.available == 2
    client.close()


@pytest.mark.triton
def test_a_crashed_owners_regions_are_reclaimed_by_the_next_open(triton: LocalTriton, tmp_path: Path) -> None:
    crash = tmp_path / "crash.py"
    crash.write_text(
        textwrap.dedent(
            f"""
            import os, signal
            import tritonclient.grpc as grpcclient
            from triton_operator.client import SharedMemoryPool
            client = grpcclient.InferenceServerClient("{triton.grpc_url}")
            pool = SharedMemoryPool(client, 3, 1 << 20, prefix="crashy").open()
            os.kill(os.getpid(), signal.SIGKILL)
            """
        )
    )
    result = subprocess.run([sys.executable, str(crash)], capture_output=True, text=True)
    assert result.returncode == -9, result.stderr
    assert registered(triton, "crashy") == ["crashy_0", "crashy_1", "crashy_2"], "the crash leaves them registered"
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    with SharedMemoryPool(client, regions=2, region_bytes=1 << 20, prefix="crashy") as pool:
        assert registered(triton, "crashy") == ["crashy_0", "crashy_1"]
        with pool.lease() as region:
            infer_input, output = _double_through(region, grpcclient, np.ones(16, np.float32))
            assert region.read("OUT", client.infer("double", [infer_input], outputs=[output])).tolist() == [2.0] * 16
    assert registered(triton, "crashy") == [] and on_host("crashy") == []
    client.close()


@pytest.mark.triton
def test_read_copies_by_default_and_gives_a_view_on_request(triton: LocalTriton) -> None:
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    with SharedMemoryPool(client, regions=1, region_bytes=1 << 16, prefix="views") as pool, pool.lease() as region:
        infer_input, output = _double_through(region, grpcclient, np.ones(8, np.float32))
        result = client.infer("double", [infer_input], outputs=[output])
        copied, view = region.read("OUT", result), region.read("OUT", result, copy=False)
        assert copied.flags.owndata and not view.flags.owndata
        assert copied.tolist() == view.tolist() == [2.0] * 8
        with pytest.raises(ValueError, match="raise the pool's region_bytes"):
            region.put(grpcclient.InferInput("IN", [1 << 15], "FP32"), np.ones(1 << 15, np.float32))
    client.close()


def test_the_client_imports_without_the_operators_dependencies() -> None:
    blocked = ["kopf", "kubernetes", "kubernetes_validate", "pydantic", "pydantic_settings", "yaml"]
    code = f"import sys\nfor name in {blocked!r}: sys.modules[name] = None\nimport triton_operator.client\nprint('ok')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "ok", result.stderr
