#!/usr/bin/env bash
# The GPU check (`make gpu-check`): on a host with an NVIDIA GPU and Python 3.12, without network, from the
# bundle `make gpu-bundle` writes on a machine with network. Runs the `gpu` tests (the CUDA pool, a KIND_GPU
# model, Triton's GPU metrics, a KIND_GPU model's GPU memory from NVML), the client-pool and sample tests, and
# the pool benchmark with CUDA shared memory beside system shared memory and plain HTTP. About 3 minutes on an
# H100 host.
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=${GPU_BUNDLE:-.gpu-bundle}
PYTHON=${PYTHON:-python3}
[[ -f $BUNDLE/tritonserver.tar.xz ]] || {
    echo "no $BUNDLE here: run 'make gpu-bundle' where there is network, then copy it" >&2
    exit 2
}
work=$(mktemp -d /tmp/triton-operator-gpu.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "== host"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "no nvidia-smi here"
"$PYTHON" --version
cat "$BUNDLE/versions"
# A venv whose own packages (the bundle's, numpy < 2 above all) come before the host Python's: the python
# backend's stub embeds the Python first on PATH, this venv's, and reads no PYTHONPATH.
"$PYTHON" -m venv --without-pip "$work/venv"
packages=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
"$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --target "$packages" "$BUNDLE"/wheels/*.whl
"$PYTHON" -c \
    'import site, sys; print("\n".join(site.getsitepackages() + [p for p in sys.path if p.endswith("-packages")]))' \
    >"$packages/host-packages.pth"
tar -C "$packages" -xJf "$BUNDLE/tritonserver.tar.xz"
export PATH="$work/venv/bin:$PATH" PYTHONPATH="$PWD/operator:$PWD" PYTHONUNBUFFERED=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
python -c 'import numpy; print("numpy", numpy.__version__, "for the tests and the stub")'

echo "== tests"
tests=0
python -m pytest -p pytest_asyncio.plugin -p no:cacheprovider -q -rs -s \
    tests/client/test_gpu.py tests/client/test_cuda_regions.py tests/client/test_client_pool.py \
    tests/memory/test_gpu_memory.py tests/local/test_local_samples.py tests/local/test_local_gpus.py || tests=$?

echo "== pool benchmark (system shm, CUDA shm, plain HTTP)"
python bench/shm_pool.py --cuda --repeats "${GPU_BENCH_REPEATS:-30}"
exit "$tests"
