"""Writes the Dockerfiles in this folder with Triton's own compose.py, for the image tests to compare
`triton-operator image` against: what compose.py writes for the same backends, caches and agents.

Written from compose.py and build.py of triton-inference-server/server at tag v2.50.0 (commit
c3414c1314ff2eaaae1987735b1dc5fc3300e8be, the 24.09 release), x86_64, with the values compose.py
would read from `docker inspect` of the 24.09 full image given by hand (no registry answers here):
TRITON_VERSION 2.50.0 and DCGM 3.2.6 (build.py's TRITON_VERSION_MAP for 2.50.0), build id and ref
"unknown", no SageMaker `serve`. Rerun: python generate.py PATH_TO_A_CHECKOUT_AT_v2.50.0
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
ARGMAP = {
    "NVIDIA_BUILD_REF": "unknown",
    "NVIDIA_BUILD_ID": "unknown",
    "TRITON_VERSION": "2.50.0",
    "TRITON_CONTAINER_VERSION": "24.09",
    "DCGM_VERSION": "3.2.6",
    "SAGEMAKER_ENDPOINT": False,
}


def main(checkout: Path) -> None:
    sys.path.insert(0, str(checkout))
    sys.modules.setdefault("distro", types.ModuleType("distro"))  # build.py imports them; compose's path never calls them
    sys.modules.setdefault("requests", types.ModuleType("requests"))
    import build
    import compose

    build.FLAGS = types.SimpleNamespace(target_platform="linux", target_machine="x86_64")
    for name, (backends, repoagents, caches, gpu) in CASES.items():
        compose.FLAGS = types.SimpleNamespace(enable_gpu=gpu, quiet=True, verbose=False)
        images = (
            {"full": "nvcr.io/nvidia/tritonserver:24.09-py3", "min": "nvcr.io/nvidia/tritonserver:24.09-py3-min"}
            if gpu
            else {"full": "nvcr.io/nvidia/tritonserver:24.09-cpu-only-py3", "min": "ubuntu:22.04"}
        )
        if not gpu and {"pytorch", "tensorflow", "tensorflow2"} & set(backends):
            images["gpu-min"] = "nvcr.io/nvidia/tritonserver:24.09-py3-min"
        dockerfile = f"{name}.Dockerfile"
        compose.start_dockerfile(str(HERE), images, ARGMAP, dockerfile, backends)
        compose.add_requested_backends(str(HERE), dockerfile, backends)
        compose.add_requested_repoagents(str(HERE), dockerfile, repoagents)
        compose.add_requested_caches(str(HERE), dockerfile, caches)
        compose.end_dockerfile(str(HERE), dockerfile, ARGMAP)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
