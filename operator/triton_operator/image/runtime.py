"""The runtime set-up of a slim Triton image: build.py's `dockerfile_prepare_container_linux`, per release.

Its own module because it is the part of the image recipe transcribed from Triton's build.py rather
than compose.py, and the part that differs most from release to release (TritonRelease says how):
Triton's environment and user, its apt dependencies, DCGM and the CUDA compatibility libraries on a
GPU image, the CUDA libraries a CPU-only pytorch still loads, and the python backend's python3.
How the Dockerfile around it is composed is image/recipe.py's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TritonRelease:
    """One release's recipe: what compose.py reads from `docker inspect` of its full image, and where
    build.py's set-up for it differs from another release's."""

    container: str  # NVIDIA's container version, 24.09
    server: str  # Triton's own version in it
    tag: str  # the tag of Triton's repository the recipe is transcribed from
    dcgm: str  # the DCGM the GPU image installs
    ubuntu: str  # of the min image, and the base of a CPU-only one
    cuda_keyring: str  # the version of NVIDIA's cuda-keyring package, which adds the repository DCGM comes from
    common_packages: tuple[str, ...]  # Triton's runtime dependencies from apt, whatever the backends
    # Ubuntu 24.04's Python refuses pip installs unless PIP_BREAK_SYSTEM_PACKAGES is set: compose.py sets it,
    # and build.py takes wheel and setuptools from apt and no longer upgrades pip.
    externally_managed_python: bool
    cpu_cuda_backends: tuple[str, ...]  # backends whose CPU-only build still loads CUDA libraries, from the min image
    cpu_nccl_backends: tuple[str, ...]  # those of them that also load NCCL
    cpu_cuda_runtime: tuple[str, ...]  # the CUDA runtime libraries a CPU-only pytorch loads
    cpu_pytorch_apt: tuple[str, ...]  # what a CPU-only pytorch installs from apt (MPI, and patchelf for libtorch_cuda)
    cpu_pytorch_pip: tuple[str, ...]  # and from pip

    @property
    def cpu_base(self) -> str:
        return f"ubuntu:{self.ubuntu}"

    @property
    def cuda_keyring_url(self) -> str:
        repository = f"ubuntu{self.ubuntu.replace('.', '')}"
        return f"https://developer.download.nvidia.com/compute/cuda/repos/{repository}/x86_64/cuda-keyring_{self.cuda_keyring}_all.deb"


_PIP = "pip3 install --no-cache-dir"


def runtime_setup(release: TritonRelease, backends: Mapping[str, object], gpu: bool) -> str:
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
    gomp = ("libgomp1",) if {"onnxruntime", "pytorch"} & set(backends) else ()
    text += f"""
ENV TF_ADJUST_HUE_FUSED=1
ENV TF_ADJUST_SATURATION_FUSED=1
ENV TF_ENABLE_WINOGRAD_NONFUSED=1
ENV TF_AUTOTUNE_THRESHOLD=2
ENV TRITON_SERVER_GPU_ENABLED={1 if gpu else 0}

# The user Triton runs as, uid and gid 1000 (Ubuntu 24.04's user ubuntu has them): everything copied below is theirs.
ENV TRITON_SERVER_USER=triton-server
RUN userdel tensorrt-server > /dev/null 2>&1 || true \\
      && userdel ubuntu > /dev/null 2>&1 || true \\
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
{_listed((*release.common_packages, *gomp), 14)}\
      && rm -rf /var/lib/apt/lists/*

# For users who set LD_PRELOAD with tcmalloc.
ENV TCMALLOC_RELEASE_RATE=200
"""
    text += _gpu_runtime(release) if gpu else _cpu_libraries(release, backends)
    if "python" in backends:
        text += _python_backend(release)
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
    return (
        text
        + """COPY --from=full /opt/nvidia/ /opt/nvidia/
ENTRYPOINT ["/opt/nvidia/nvidia_entrypoint.sh"]
"""
    )


def _listed(items: Sequence[str], indent: int) -> str:
    """One item a line, each continued: the lines of a RUN's package list."""
    return "".join(f"{' ' * indent}{item} \\\n" for item in items)


def _python_backend(release: TritonRelease) -> str:
    apt: tuple[str, ...]
    pip: tuple[str, ...]
    if release.externally_managed_python:  # wheel and setuptools from apt, and Ubuntu's pip left as it is
        apt, upgrade_pip, pip = ("python3-wheel", "python3-setuptools"), "", ()
    else:
        apt, upgrade_pip, pip = (), f"      && {_PIP} --upgrade pip \\\n", ("wheel", "setuptools")
    return f"""
# The python backend's python3, its libarchive, and numpy < 2 (its stub is built against numpy 1).
# hadolint ignore=DL3008,DL3013
RUN apt-get update \\
      && apt-get install -y --no-install-recommends \\
{_listed(("python3", "libarchive-dev", "python3-pip", *apt, "libpython3-dev"), 12)}\
{upgrade_pip}      && {_PIP} --upgrade \\
{_listed((*pip, '"numpy<2"', "virtualenv"), 12)}\
      && rm -rf /var/lib/apt/lists/*
"""


def _gpu_runtime(release: TritonRelease) -> str:
    return f"""
ENV DCGM_VERSION={release.dcgm}
# DCGM, for Triton's GPU metrics. Steps from https://developer.nvidia.com/dcgm#Downloads
# hadolint ignore=DL3008
RUN curl -o /tmp/cuda-keyring.deb \\
          {release.cuda_keyring_url} \\
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


def _cpu_libraries(release: TritonRelease, backends: Mapping[str, object]) -> str:
    """NVIDIA's CPU-only pytorch (and 24.x's tensorflow) still loads CUDA stubs, NCCL and HPC-X: from the min image."""
    text = ""
    if "pytorch" in backends:
        runtime = "".join(
            f"COPY --from=min_container /usr/local/cuda/lib64/{library} /usr/local/cuda/targets/x86_64-linux/lib/.\n"
            for library in release.cpu_cuda_runtime
        )
        pip = f"      && {_PIP} {' '.join(release.cpu_pytorch_pip)} \\\n" if release.cpu_pytorch_pip else ""
        text += f"""
RUN mkdir -p /usr/local/cuda/lib64/stubs
COPY --from=min_container /usr/local/cuda/lib64/stubs/libcusparse.so /usr/local/cuda/lib64/stubs/libcusparse.so.12
COPY --from=min_container /usr/local/cuda/lib64/stubs/libcusolver.so /usr/local/cuda/lib64/stubs/libcusolver.so.11
COPY --from=min_container /usr/local/cuda/lib64/stubs/libcurand.so /usr/local/cuda/lib64/stubs/libcurand.so.10
COPY --from=min_container /usr/local/cuda/lib64/stubs/libcufft.so /usr/local/cuda/lib64/stubs/libcufft.so.11
COPY --from=min_container /usr/local/cuda/lib64/stubs/libcublas.so /usr/local/cuda/lib64/stubs/libcublas.so.12
COPY --from=min_container /usr/local/cuda/lib64/stubs/libcublasLt.so /usr/local/cuda/lib64/stubs/libcublasLt.so.12
COPY --from=min_container /usr/local/cuda/lib64/stubs/libcublasLt.so /usr/local/cuda/lib64/stubs/libcublasLt.so.11

RUN mkdir -p /usr/local/cuda/targets/x86_64-linux/lib
{runtime}
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
      && apt-get install -y --no-install-recommends {" ".join(release.cpu_pytorch_apt)} \\
{pip}      && rm -rf /var/lib/apt/lists/*

ENV LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/cuda/lib64/stubs:${{LD_LIBRARY_PATH}}
"""
    if any(backend in backends for backend in release.cpu_nccl_backends):
        text += """
COPY --from=min_container /usr/lib/x86_64-linux-gnu/libnccl.so.2 /usr/lib/x86_64-linux-gnu/libnccl.so.2
"""
    return text
