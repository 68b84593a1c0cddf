#!/usr/bin/env bash
# Writes .gpu-bundle/ (about 55 MB): what `make gpu-check` needs on a GPU host without network. The
# tritonserver of the nvidia-pytriton wheel installed in .venv (binary, the libraries it loads, the python
# backend, the stub for Python 3.12), and Python 3.12 wheels, at the versions .venv holds, of what the GPU
# tests import beyond a CUDA host's usual packages (cuda-bindings, grpcio, aiohttp, pytest, PyYAML): numpy < 2
# above all, as the python backend reads numpy 2 arrays wrong.
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=.gpu-bundle
PYTHON_VERSION=${GPU_PYTHON_VERSION:-3.12}
WHEELS=(numpy tritonclient geventhttpclient gevent greenlet zope.event zope.interface brotli python-rapidjson
    protobuf pydantic pydantic-core pydantic-settings python-dotenv typing-inspection annotated-types watchfiles
    pytest-asyncio nvidia-ml-py)
rm -rf "$BUNDLE" && mkdir -p "$BUNDLE/wheels"

site=$(.venv/bin/python -c \
    'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("pytriton").origin).parents[1])')
# The libpython of the wheel serves its Python 3.13 stub only.
tar -C "$site" --exclude='nvidia_pytriton.libs/libpython3-*' -cf - \
    pytriton/__init__.py pytriton/tritonserver/bin pytriton/tritonserver/backends pytriton/tritonserver/caches \
    "pytriton/tritonserver/python_backend_stubs/$PYTHON_VERSION" nvidia_pytriton.libs |
    xz -T0 -9 >"$BUNDLE/tritonserver.tar.xz"

pins=$(.venv/bin/python -c \
    'import importlib.metadata as m, sys; print(" ".join(f"{n}=={m.version(n)}" for n in sys.argv[1:]))' \
    "${WHEELS[@]}")
pytriton=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("nvidia-pytriton"))')
echo "nvidia-pytriton==$pytriton $pins" >"$BUNDLE/versions"
platforms=()
for tag in manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux2014 manylinux1 manylinux_2_5; do
    platforms+=(--platform "${tag}_x86_64")
done
# shellcheck disable=SC2086 # one argument per pin
.venv/bin/pip download --quiet --no-deps --only-binary=:all: --python-version "$PYTHON_VERSION" --implementation cp \
    "${platforms[@]}" --platform any -d "$BUNDLE/wheels" $pins 2>&1 | grep -v "^WARNING: Location" || true
du -sh "$BUNDLE"/* | sed "s|^|$BUNDLE: |"
