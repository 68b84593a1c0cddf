"""A Triton image with only what one server's models use: the Dockerfile Triton's compose.py writes.

NVIDIA's full image carries every backend (24.09: about 16.9 GB). Triton's compose.py builds a
slim one from it: the full image as a build stage, the `-min` image (CUDA, no Triton) as the base,
Triton's runtime set-up for the chosen backends (build.py's `dockerfile_prepare_container_linux`:
apt packages, the python backend's python3 with `numpy<2`, DCGM on GPU images, CUDA libraries
copied from the min image into a CPU-only pytorch image), then `/opt/tritonserver` and one COPY per
backend, repository agent and cache. This module writes the same Dockerfile from what the operator
knows: the server's `backends` (or only those its models use), the response cache a model enables
or the server's `--cache-config` names, and the models' repository agents.

Transcribed from compose.py and build.py at Triton's tag v2.50.0 (the 24.09 release); the tests
compare it with what that compose.py writes (tests/data/compose). Where it differs from compose.py,
and why: Triton's entrypoint files come from the full image rather than from a checkout of Triton's
repository (so the build needs no context), NVIDIA's build id labels and SageMaker's `serve` are
left out (they describe NVIDIA's build, not this one), apt-get replaces apt, command substitutions
replace backticks, pip keeps no cache and the lists apt reads are removed after every install
(hadolint's rules), and two build arguments point apt and pip at mirrors for networks that reach
neither Ubuntu's archive nor PyPI.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..api.server import TritonServerSpec
from ..api.validation import models_by_backend
from ..protocol.model_config import model_config_pb2 as pb


@dataclass(frozen=True)
class TritonRelease:
    """What compose.py reads from `docker inspect` of a release's full image, and its CPU base."""

    container: str  # NVIDIA's container version, 24.09
    server: str  # Triton's own version in it
    dcgm: str  # the DCGM the GPU image installs
    cpu_base: str  # compose.py's base for a CPU-only image


# build.py's TRITON_VERSION_MAP at each tag; a release whose set-up differs (25.x moved to Ubuntu 24.04) needs its own transcription.
RELEASES = {"24.09": TritonRelease(container="24.09", server="2.50.0", dcgm="3.2.6", cpu_base="ubuntu:22.04")}
DEFAULT_RELEASE = "24.09"
# Backends NVIDIA builds only for GPUs: a CPU-only image has none of them.
GPU_ONLY_BACKENDS = ("tensorrt",)
# Backends whose libraries on a CPU-only image still link against CUDA, NCCL and HPC-X, copied from the min image.
CUDA_LINKED_BACKENDS = ("pytorch", "tensorflow", "tensorflow2")
LOCAL_CACHE = "local"
_CACHE_CONFIG = re.compile(r"^--cache-config(?:=|$)")


@dataclass(frozen=True)
class ImageContents:
    """What goes into the image, each with the models that need it (empty: listed by the server only)."""

    backends: Mapping[str, Sequence[str]]
    caches: Mapping[str, Sequence[str]]
    repoagents: Mapping[str, Sequence[str]]


def server_caches(server: TritonServerSpec) -> list[str]:
    """The caches the server's `--cache-config NAME,...` flags (in extraArgs) name."""
    names, args = [], server.extra_args
    for index, arg in enumerate(args):
        if _CACHE_CONFIG.match(arg):
            value = arg.partition("=")[2] if "=" in arg else (args[index + 1] if index + 1 < len(args) else "")
            names.append(value.split(",", 1)[0])
    return [name for name in names if name]


def image_contents(server: TritonServerSpec, configs: Sequence[pb.ModelConfig], only_used: bool) -> ImageContents:
    """The server's backends (only those its models use, when asked), its caches and its models' agents."""
    users = models_by_backend(configs)
    backends = {backend: users.get(backend, []) for backend in sorted(users if only_used else server.backends)}
    cached = [config.name for config in configs if config.response_cache.enable]
    caches: dict[str, list[str]] = {name: [] for name in server_caches(server)}
    if cached and not caches:  # Triton's response cache is the local one unless the server names another
        caches[LOCAL_CACHE] = []
    for name in caches:
        caches[name] = cached
    agents: dict[str, list[str]] = {}
    for config in configs:
        for agent in config.model_repository_agents.agents:
            agents.setdefault(agent.name, []).append(config.name)
    return ImageContents(backends, dict(sorted(caches.items())), dict(sorted(agents.items())))


def image_problems(contents: ImageContents, gpu: bool) -> list[str]:
    """Why this image cannot be composed as asked (none: it can)."""
    if gpu:
        return []
    return [
        f"backend '{backend}' runs only on GPUs (a CPU-only image has none): compose with --gpu, or leave it out of the "
        "server's spec.backends (or use --only-used when no model needs it)"
        for backend in GPU_ONLY_BACKENDS
        if backend in contents.backends
    ]


def _needs(what: str, items: Mapping[str, Sequence[str]]) -> list[str]:
    return [f"#   {what} {name}: {', '.join(models) if models else '(listed by the server; no model uses it)'}" for name, models in items.items()]


def _header(server: str, contents: ImageContents, release: TritonRelease, gpu: bool) -> str:
    lines = [
        f"# Triton {release.container} (server {release.server}, {'GPU' if gpu else 'CPU-only'}) for {server}, with only",
        "# what its models need, as Triton's compose.py composes it. Written by `triton-operator image`; write it again",
        "# when the models change. Which models need what:",
        *_needs("backend", contents.backends),
        *_needs("cache", contents.caches),
        *_needs("repository agent", contents.repoagents),
        "# Build (no context needed), push, then set the server's spec.image to it and spec.backends to",
        f"# [{', '.join(contents.backends)}]:",
        "#   docker build -t REGISTRY/tritonserver:TAG - < THIS_FILE",
        "# Behind a mirror: --build-arg APT_MIRROR=http://mirror/ubuntu/ --build-arg PIP_MIRROR=https://mirror/simple/",
    ]
    return "\n".join(lines) + "\n"


def _stages(release: TritonRelease, backends: Mapping[str, object], gpu: bool) -> str:
    full = f"nvcr.io/nvidia/tritonserver:{release.container}-py3" if gpu else f"nvcr.io/nvidia/tritonserver:{release.container}-cpu-only-py3"
    gpu_min = f"nvcr.io/nvidia/tritonserver:{release.container}-py3-min"
    text = f"""
ARG TRITON_VERSION={release.server}
ARG TRITON_CONTAINER_VERSION={release.container}

FROM {full} AS full
"""
    if not gpu and any(backend in backends for backend in CUDA_LINKED_BACKENDS):
        text += f"""
FROM {gpu_min} AS min_container
"""
    return text + f"""
FROM {gpu_min if gpu else release.cpu_base}

ARG TRITON_VERSION
ARG TRITON_CONTAINER_VERSION
# Mirrors for Ubuntu's archive and for PyPI (empty: the public ones).
ARG APT_MIRROR=
ARG PIP_MIRROR=

RUN if [ -n "$APT_MIRROR" ]; then \\
        sed -i -E "s#https?://(archive|security)\\.ubuntu\\.com/ubuntu/?#$APT_MIRROR#g" /etc/apt/sources.list; \\
    fi
"""


_PIP = 'pip3 install --no-cache-dir ${PIP_MIRROR:+--index-url "$PIP_MIRROR"}'


def _runtime(release: TritonRelease, backends: Mapping[str, object], gpu: bool) -> str:
    """build.py's dockerfile_prepare_container_linux for Ubuntu on x86_64."""
    text = """
ENV TRITON_SERVER_VERSION=${TRITON_VERSION}
ENV NVIDIA_TRITON_SERVER_VERSION=${TRITON_CONTAINER_VERSION}
LABEL com.nvidia.tritonserver.version="${TRITON_SERVER_VERSION}"

ENV PATH=/opt/tritonserver/bin:${PATH}
# Triton's build sets it until the min image carries https://github.com/openucx/ucx/pull/9148.
ENV UCX_MEM_EVENTS=no
"""
    if "pytorch" in backends:
        text += """
# libtorch finds HPC-X here.
ENV LD_LIBRARY_PATH=/opt/hpcx/ucc/lib/:/opt/hpcx/ucx/lib/:${LD_LIBRARY_PATH}
"""
    gomp = "              libgomp1 \\\n" if {"onnxruntime", "pytorch"} & set(backends) else ""
    text += f"""
ENV TF_ADJUST_HUE_FUSED=1
ENV TF_ADJUST_SATURATION_FUSED=1
ENV TF_ENABLE_WINOGRAD_NONFUSED=1
ENV TF_AUTOTUNE_THRESHOLD=2
ENV TRITON_SERVER_GPU_ENABLED={1 if gpu else 0}

# The user Triton runs as, uid and gid 1000: everything copied below is theirs.
ENV TRITON_SERVER_USER=triton-server
RUN userdel tensorrt-server > /dev/null 2>&1 || true \\
      && if ! id -u "$TRITON_SERVER_USER" > /dev/null 2>&1 ; then \\
          useradd "$TRITON_SERVER_USER"; \\
        fi \\
      && [ "$(id -u "$TRITON_SERVER_USER")" -eq 1000 ] \\
      && [ "$(id -g "$TRITON_SERVER_USER")" -eq 1000 ]

ENV DEBIAN_FRONTEND=noninteractive

# Triton's common runtime dependencies, and its backends' (libgomp1: onnxruntime and pytorch).
# Ubuntu's archive keeps only a release's latest versions, so packages are not pinned, as in Triton's build.
# hadolint ignore=DL3008
RUN apt-get update \\
      && apt-get install -y --no-install-recommends \\
              clang \\
              curl \\
              dirmngr \\
              git \\
              gperf \\
              libb64-0d \\
              libcurl4-openssl-dev \\
              libgoogle-perftools-dev \\
              libjemalloc-dev \\
              libnuma-dev \\
              libre2-9 \\
              software-properties-common \\
              wget \\
{gomp}      && rm -rf /var/lib/apt/lists/*

# For users who set LD_PRELOAD with tcmalloc.
ENV TCMALLOC_RELEASE_RATE=200
"""
    text += _gpu_runtime(release) if gpu else _cpu_libraries(backends)
    if "python" in backends:
        text += f"""
# The python backend's python3, its libarchive, and numpy < 2 (its stub is built against numpy 1).
# hadolint ignore=DL3008,DL3013
RUN apt-get update \\
      && apt-get install -y --no-install-recommends \\
            python3 \\
            libarchive-dev \\
            python3-pip \\
            libpython3-dev \\
      && {_PIP} --upgrade pip \\
      && {_PIP} --upgrade \\
            wheel \\
            setuptools \\
            "numpy<2" \\
            virtualenv \\
      && rm -rf /var/lib/apt/lists/*
"""
    if "dali" in backends:
        text += """
ENV PYTHONPATH=/opt/tritonserver/backends/dali/wheel/dali:$PYTHONPATH
"""
    text += """
WORKDIR /opt/tritonserver
RUN rm -fr /opt/tritonserver/*
ENV NVIDIA_PRODUCT_NAME="Triton Server"
"""
    if gpu:
        return text + "COPY --from=full /opt/nvidia/entrypoint.d/ /opt/nvidia/entrypoint.d/\n"
    # Ubuntu has no NVIDIA entrypoint: the CPU-only full image's comes with its start-up messages.
    return text + """COPY --from=full /opt/nvidia/ /opt/nvidia/
ENTRYPOINT ["/opt/nvidia/nvidia_entrypoint.sh"]
"""


def _gpu_runtime(release: TritonRelease) -> str:
    return f"""
ENV DCGM_VERSION={release.dcgm}
# DCGM, for Triton's GPU metrics. Steps from https://developer.nvidia.com/dcgm#Downloads
# hadolint ignore=DL3008
RUN curl -o /tmp/cuda-keyring.deb \\
          https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/cuda-keyring_1.0-1_all.deb \\
      && apt-get install -y --no-install-recommends /tmp/cuda-keyring.deb \\
      && rm /tmp/cuda-keyring.deb \\
      && apt-get update \\
      && apt-get install -y --no-install-recommends datacenter-gpu-manager=1:{release.dcgm} \\
      && rm -rf /var/lib/apt/lists/*

# The CUDA compatibility libraries, found first.
RUN ln -sf "${{_CUDA_COMPAT_PATH}}/lib.real" "${{_CUDA_COMPAT_PATH}}/lib" \\
      && echo "${{_CUDA_COMPAT_PATH}}/lib" > /etc/ld.so.conf.d/00-cuda-compat.conf \\
      && ldconfig \\
      && rm -f "${{_CUDA_COMPAT_PATH}}/lib"
"""


def _cpu_libraries(backends: Mapping[str, object]) -> str:
    """NVIDIA's CPU-only pytorch and tensorflow still load CUDA stubs, NCCL and HPC-X: from the min image."""
    text = ""
    if "pytorch" in backends:
        text += """
RUN mkdir -p /usr/local/cuda/lib64/stubs
COPY --from=min_container /usr/local/cuda/lib64/stubs/libcusparse.so /usr/local/cuda/lib64/stubs/libcusparse.so.12
COPY --from=min_container /usr/local/cuda/lib64/stubs/libcusolver.so /usr/local/cuda/lib64/stubs/libcusolver.so.11
COPY --from=min_container /usr/local/cuda/lib64/stubs/libcurand.so /usr/local/cuda/lib64/stubs/libcurand.so.10
COPY --from=min_container /usr/local/cuda/lib64/stubs/libcufft.so /usr/local/cuda/lib64/stubs/libcufft.so.11
COPY --from=min_container /usr/local/cuda/lib64/stubs/libcublas.so /usr/local/cuda/lib64/stubs/libcublas.so.12
COPY --from=min_container /usr/local/cuda/lib64/stubs/libcublasLt.so /usr/local/cuda/lib64/stubs/libcublasLt.so.12
COPY --from=min_container /usr/local/cuda/lib64/stubs/libcublasLt.so /usr/local/cuda/lib64/stubs/libcublasLt.so.11

RUN mkdir -p /usr/local/cuda/targets/x86_64-linux/lib
COPY --from=min_container /usr/local/cuda/lib64/libcudart.so.12 /usr/local/cuda/targets/x86_64-linux/lib/.
COPY --from=min_container /usr/local/cuda/lib64/libcupti.so.12 /usr/local/cuda/targets/x86_64-linux/lib/.
COPY --from=min_container /usr/local/cuda/lib64/libnvToolsExt.so.1 /usr/local/cuda/targets/x86_64-linux/lib/.
COPY --from=min_container /usr/local/cuda/lib64/libnvJitLink.so.12 /usr/local/cuda/targets/x86_64-linux/lib/.

RUN mkdir -p /opt/hpcx/ucc/lib/ /opt/hpcx/ucx/lib/
COPY --from=min_container /opt/hpcx/ucc/lib/libucc.so.1 /opt/hpcx/ucc/lib/libucc.so.1
COPY --from=min_container /opt/hpcx/ucx/lib/libucm.so.0 /opt/hpcx/ucx/lib/libucm.so.0
COPY --from=min_container /opt/hpcx/ucx/lib/libucp.so.0 /opt/hpcx/ucx/lib/libucp.so.0
COPY --from=min_container /opt/hpcx/ucx/lib/libucs.so.0 /opt/hpcx/ucx/lib/libucs.so.0
COPY --from=min_container /opt/hpcx/ucx/lib/libuct.so.0 /opt/hpcx/ucx/lib/libuct.so.0

COPY --from=min_container /usr/lib/x86_64-linux-gnu/libcudnn.so.9 /usr/lib/x86_64-linux-gnu/libcudnn.so.9

# patchelf adds libcublasLt's dependencies to libtorch_cuda.
# hadolint ignore=DL3008
RUN apt-get update \\
      && apt-get install -y --no-install-recommends openmpi-bin patchelf \\
      && rm -rf /var/lib/apt/lists/*

ENV LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/cuda/lib64/stubs:${LD_LIBRARY_PATH}
"""
    if "pytorch" in backends or "tensorflow" in backends:
        text += """
COPY --from=min_container /usr/lib/x86_64-linux-gnu/libnccl.so.2 /usr/lib/x86_64-linux-gnu/libnccl.so.2
"""
    return text


def _copies(kind: str, names: Sequence[str]) -> str:
    """One COPY per backend, agent or cache; their folder itself is not copied, so it is given to Triton's user."""
    if not names:
        return ""
    copies = "".join(f"COPY --chown=1000:1000 --from=full /opt/tritonserver/{kind}/{name} /opt/tritonserver/{kind}/{name}\n" for name in names)
    return f"{copies}RUN chown triton-server:triton-server /opt/tritonserver/{kind}\n"


def dockerfile(server: str, contents: ImageContents, release: TritonRelease, gpu: bool) -> str:
    """The Dockerfile of the image; `server` names the TritonServer it is for (in its header)."""
    return (
        _header(server, contents, release, gpu)
        + _stages(release, contents.backends, gpu)
        + _runtime(release, contents.backends, gpu)
        + """
WORKDIR /opt/tritonserver
COPY --chown=1000:1000 --from=full /opt/tritonserver/LICENSE .
COPY --chown=1000:1000 --from=full /opt/tritonserver/TRITON_VERSION .
COPY --chown=1000:1000 --from=full /opt/tritonserver/NVIDIA_Deep_Learning_Container_License.pdf .
COPY --chown=1000:1000 --from=full /opt/tritonserver/bin bin/
COPY --chown=1000:1000 --from=full /opt/tritonserver/lib lib/
COPY --chown=1000:1000 --from=full /opt/tritonserver/include include/
"""
        + _copies("backends", list(contents.backends))
        + _copies("repoagents", list(contents.repoagents))
        + _copies("caches", list(contents.caches))
    )
