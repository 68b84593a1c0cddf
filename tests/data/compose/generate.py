"""Writes the Dockerfiles in this folder's release folders (24.09/, 25.07/) with Triton's own compose.py,
for the image tests to compare `triton-operator image` against: what compose.py writes for the same
backends, caches and agents. Each file's first line names the tag and commit it was written from.

compose.py and build.py of triton-inference-server/server, x86_64, with the values compose.py would
read from `docker inspect` of the release's full image given by hand (no registry answers here): the
release's TRITON_VERSION and DCGM_VERSION (build.py's version map at that tag), build id and ref
"unknown", no SageMaker `serve`.

- 24.09: tag v2.50.0 (commit c3414c1314ff2eaaae1987735b1dc5fc3300e8be).
- 25.07: tag v2.59.1 (commit 559f87bd1bfdcb02b3e6005ff7d6b32d236b0f53). Its CPU-only image is written
  on ubuntu:24.04, the base its build.py builds the CPU-only full image on (`base_image =
  "ubuntu:24.04"`), given as compose.py's `--image min,ubuntu:24.04`: compose.py's own default there is
  still ubuntu:22.04, whose Python 3.10 and libraries do not match what that full image was built with.

Rerun: python generate.py RELEASE PATH_TO_A_CHECKOUT_AT_ITS_TAG (a `git archive TAG build.py compose.py` suffices)
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

HERE = Path(__file__).parent
# name: (backends, repoagents, caches, gpu)
CASES = {
    "python-gpu": (["python"], [], [], True),
    "onnxruntime-python-tensorrt-gpu": (["onnxruntime", "python", "tensorrt"], ["checksum"], ["local"], True),
    "pytorch-gpu": (["pytorch"], [], [], True),
    "pytorch-cpu": (["pytorch"], [], [], False),
}
# release: (tag, commit, server version, DCGM version, CPU-only base, backends whose CPU-only build needs the GPU min image)
RELEASES = {
    "24.09": ("v2.50.0", "c3414c1314ff2eaaae1987735b1dc5fc3300e8be", "2.50.0", "3.2.6", "ubuntu:22.04", {"pytorch", "tensorflow", "tensorflow2"}),
    "25.07": ("v2.59.1", "559f87bd1bfdcb02b3e6005ff7d6b32d236b0f53", "2.59.1", "3.3.6", "ubuntu:24.04", {"pytorch"}),
}


def main(release: str, checkout: Path) -> None:
    tag, commit, server, dcgm, cpu_base, needs_gpu_min = RELEASES[release]
    argmap = {
        "NVIDIA_BUILD_REF": "unknown",
        "NVIDIA_BUILD_ID": "unknown",
        "TRITON_VERSION": server,
        "TRITON_CONTAINER_VERSION": release,
        "DCGM_VERSION": dcgm,
        "SAGEMAKER_ENDPOINT": False,
    }
    sys.path.insert(0, str(checkout))
    sys.modules.setdefault("distro", types.ModuleType("distro"))  # build.py imports them; compose's path never calls them
    sys.modules.setdefault("requests", types.ModuleType("requests"))
    import build
    import compose

    build.FLAGS = types.SimpleNamespace(target_platform="linux", target_machine="x86_64")
    folder = HERE / release
    folder.mkdir(exist_ok=True)
    for name, (backends, repoagents, caches, gpu) in CASES.items():
        compose.FLAGS = types.SimpleNamespace(enable_gpu=gpu, quiet=True, verbose=False)
        images = (
            {"full": f"nvcr.io/nvidia/tritonserver:{release}-py3", "min": f"nvcr.io/nvidia/tritonserver:{release}-py3-min"}
            if gpu
            else {"full": f"nvcr.io/nvidia/tritonserver:{release}-cpu-only-py3", "min": cpu_base}
        )
        if not gpu and needs_gpu_min & set(backends):
            images["gpu-min"] = f"nvcr.io/nvidia/tritonserver:{release}-py3-min"
        dockerfile = f"{name}.Dockerfile"
        compose.start_dockerfile(str(folder), images, argmap, dockerfile, backends)
        compose.add_requested_backends(str(folder), dockerfile, backends)
        compose.add_requested_repoagents(str(folder), dockerfile, repoagents)
        compose.add_requested_caches(str(folder), dockerfile, caches)
        compose.end_dockerfile(str(folder), dockerfile, argmap)
        path = folder / dockerfile
        header = f"# Written by compose.py of triton-inference-server/server {tag} (commit {commit}), see ../generate.py\n"
        path.write_text(header + path.read_text())


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
