"""`triton-operator image`: the Dockerfile of a slim Triton image for a server's models, held to what
Triton's own compose.py writes for the same backends (tests/data/compose/RELEASE, written by compose.py of
Triton v2.50.0 for 24.09 and v2.59.1 for 25.07) and to hadolint."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.support.dockerfile import instructions_in
from triton_operator.api.resources import TritonModel, TritonServer
from triton_operator.api.server import DEFAULT_IMAGE
from triton_operator.api.types import API_VERSION
from triton_operator.cli import main
from triton_operator.image.recipe import (
    RELEASES,
    dockerfile,
    image_contents,
    image_problems,
    image_release,
    release_to_compose,
)
from triton_operator.render.fleet import plan_fleet

COMPOSED = ROOT / "tests/data/compose"


def _bases(text: str) -> list[str]:
    return [line.split()[0] for line in instructions_in(text, "FROM")]


def _copies_from_stages(text: str) -> set[tuple[str, ...]]:
    """(stage, source, destination) of every COPY from a build stage."""
    copies = set()
    for line in instructions_in(text, "COPY"):
        words = line.split()
        stage = next((word.removeprefix("--from=") for word in words if word.startswith("--from=")), None)
        if stage is not None:
            copies.add((stage, *[word for word in words if not word.startswith("--")]))
    return copies


def _installed(text: str, command: str) -> set[str]:
    """The packages every `command` (apt-get install, pip3 install) names, options and expansions left out."""
    packages = set()
    for run in instructions_in(text, "RUN"):
        for step in run.split("&&"):
            words = shlex.split(step.replace("apt install", "apt-get install"))
            if " ".join(words[:2]) == command:
                packages |= {word for word in words[2:] if not word.startswith(("-", "$"))}
    return packages


def _environment(text: str) -> set[tuple[str, str]]:
    """Each ENV as (name, value), in either of Docker's spellings."""
    pairs = set()
    for line in instructions_in(text, "ENV"):
        name, _, value = line.partition("=") if "=" in line.split()[0] else line.partition(" ")
        pairs.add((name.strip(), value.strip().strip('"')))
    return pairs


def _downloads(text: str) -> set[str]:
    """What the RUN instructions fetch (NVIDIA's repository key for DCGM)."""
    return {url for run in instructions_in(text, "RUN") for url in re.findall(r"https://[^\s\"']+", run)}


def _hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "hadolint"), "--no-color", str(path)], capture_output=True, text=True
    )


def _fleet(backends: list[str], server: dict[str, Any] | None = None, cache_and_agent: bool = False) -> Any:
    """A server listing `backends` and one model on each, named after it; with `cache_and_agent` the first
    model enables the response cache and runs the checksum agent."""
    cache_and_agent_fields = {
        "responseCache": {"enable": True},
        "modelRepositoryAgents": {"agents": [{"name": "checksum", "parameters": {"MD5:1/model.onnx": "0" * 32}}]},
    }
    spec = {
        "backends": backends,
        "modelRepository": {"uri": "s3://models/fleet"},
        "gpus": {"count": 1},
        **(server or {}),
    }
    servers = [
        TritonServer.model_validate(
            {"apiVersion": API_VERSION, "kind": "TritonServer", "metadata": {"name": "fleet"}, "spec": spec}
        )
    ]
    models = [
        TritonModel.model_validate(
            {
                "apiVersion": API_VERSION,
                "kind": "TritonModel",
                "metadata": {"name": f"m-{backend}"},
                "spec": {
                    "serverRef": {"name": "fleet"},
                    "config": {
                        "backend": backend,
                        "maxBatchSize": 8,
                        "input": [{"name": "IN", "dataType": "TYPE_FP32", "dims": [4]}],
                        "output": [{"name": "OUT", "dataType": "TYPE_FP32", "dims": [4]}],
                        **(cache_and_agent_fields if cache_and_agent and index == 0 else {}),
                    },
                },
            }
        )
        for index, backend in enumerate(backends)
    ]
    return models, servers


def _written(fleet: Any, gpu: bool, only_used: bool = False, release: str = "25.07") -> str:
    models, servers = fleet
    planned = plan_fleet(servers, models)
    assert not planned.errors, planned.errors
    [rendered] = planned.servers
    contents = image_contents(rendered.server.spec, [r.desired.parsed_config() for r in rendered.models], only_used)
    assert image_problems(contents, gpu) == []
    return dockerfile("TritonServer/default/fleet", contents, RELEASES[release], gpu)


# compose.py's fixture: the backends, whether a model uses the response cache and the checksum agent, GPU or not.
CASES = {
    "python-gpu": (["python"], False, True),
    "onnxruntime-python-tensorrt-gpu": (["onnxruntime", "python", "tensorrt"], True, True),
    "pytorch-gpu": (["pytorch"], False, True),
    "pytorch-cpu": (["pytorch"], False, False),
}


def test_every_release_has_compose_pys_fixtures() -> None:
    assert sorted(path.name for path in COMPOSED.iterdir() if path.is_dir()) == sorted(RELEASES)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("case", CASES)
def test_the_dockerfile_has_compose_pys_bases_copies_packages_and_environment(case: str, release: str) -> None:
    backends, cache_and_agent, gpu = CASES[case]
    ours = _written(_fleet(backends, cache_and_agent=cache_and_agent), gpu, release=release)
    composed = (COMPOSED / release / f"{case}.Dockerfile").read_text()
    assert f"server {RELEASES[release].tag} " in composed.splitlines()[0]  # the fixture comes from the release's tag
    assert _bases(ours) == _bases(composed)
    # compose.py copies Triton's entrypoint from a checkout of Triton's repository, this from the full image
    entrypoint = "/opt/nvidia/entrypoint.d/" if gpu else "/opt/nvidia/"
    assert _copies_from_stages(ours) == _copies_from_stages(composed) | {("full", entrypoint, entrypoint)}
    for command in ("apt-get install", "pip3 install"):
        assert _installed(ours, command) == _installed(composed, command), command
    assert _environment(ours) == _environment(composed) - {
        ("NVIDIA_BUILD_ID", "unknown")
    }  # NVIDIA's build, not this one
    assert _downloads(ours) == _downloads(composed)


@pytest.mark.parametrize("release", RELEASES)
def test_the_dockerfile_needs_no_build_context(release: str) -> None:
    """Every COPY comes from a stage: `docker build - < Dockerfile` builds it."""
    for case, (backends, cache_and_agent, gpu) in CASES.items():
        ours = _written(_fleet(backends, cache_and_agent=cache_and_agent), gpu, release=release)
        assert all("--from=" in copy for copy in instructions_in(ours, "COPY")), case


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("case", CASES)
def test_the_dockerfile_passes_hadolint(case: str, release: str, tmp_path: Path) -> None:
    backends, cache_and_agent, gpu = CASES[case]
    path = tmp_path / "Dockerfile"
    path.write_text(_written(_fleet(backends, cache_and_agent=cache_and_agent), gpu, release=release))
    result = _hadolint(path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_header_says_which_models_need_which_backend_cache_and_agent() -> None:
    header = _written(_fleet(["onnxruntime", "python"], cache_and_agent=True), gpu=True).split("\nARG ", 1)[0]
    assert "#   backend onnxruntime: m-onnxruntime\n" in header
    assert "#   backend python: m-python\n" in header
    assert "#   cache local: m-onnxruntime\n" in header
    assert "#   repository agent checksum: m-onnxruntime\n" in header


def _backend_copies(text: str) -> set[str]:
    return {source.rsplit("/", 1)[1] for stage, source, *_ in _copies_from_stages(text) if "/backends/" in source}


def test_a_model_with_a_new_backend_widens_the_recipe_and_a_removed_one_narrows_it() -> None:
    models, servers = _fleet(["python", "onnxruntime", "pytorch"])
    narrow = _written((models[:1], servers), gpu=True, only_used=True)
    assert _backend_copies(narrow) == {"python"}
    assert "libgomp1" not in _installed(narrow, "apt-get install")
    widened = _written((models[:2], servers), gpu=True, only_used=True)
    assert _backend_copies(widened) == {"python", "onnxruntime"}
    assert "libgomp1" in _installed(widened, "apt-get install")  # onnxruntime's runtime package comes with it
    assert _backend_copies(_written((models[1:2], servers), gpu=True, only_used=True)) == {"onnxruntime"}


def test_without_only_used_the_image_has_every_backend_the_server_lists() -> None:
    models, servers = _fleet(["python", "onnxruntime"])
    assert _backend_copies(_written((models[:1], servers), gpu=True)) == {"python", "onnxruntime"}


def test_the_server_s_cache_config_names_the_cache() -> None:
    fleet = _fleet(["python"], {"extraArgs": ["--cache-config=redis,host=cache"]}, cache_and_agent=True)
    copies = _copies_from_stages(_written(fleet, gpu=True))
    assert ("full", "/opt/tritonserver/caches/redis", "/opt/tritonserver/caches/redis") in copies
    assert not any("/caches/local" in source for _, source, *_ in copies)


def test_tensorrt_on_a_cpu_only_image_is_refused() -> None:
    _models, servers = _fleet(["tensorrt"])
    contents = image_contents(servers[0].spec, [], only_used=False)
    [problem] = image_problems(contents, gpu=False)
    assert "tensorrt" in problem and "--gpu" in problem


def _write_fleet(tmp_path: Path, backends: list[str], image: str | None = None) -> Path:
    models, servers = _fleet(backends, {"image": image} if image else None)
    path = tmp_path / "fleet.yaml"
    path.write_text(
        yaml.safe_dump_all([obj.model_dump(by_alias=True, exclude_unset=True) for obj in [*servers, *models]])
    )
    return path


def test_the_cli_writes_one_dockerfile_per_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write_fleet(tmp_path, ["python", "onnxruntime"])
    assert main(["image", str(path), "--only-used", "--out", str(tmp_path / "out")]) == 0
    written = (tmp_path / "out" / "fleet.Dockerfile").read_text()
    assert _backend_copies(written) == {"python", "onnxruntime"}
    assert "wrote" in capsys.readouterr().out


def test_the_cli_refuses_an_unknown_release_and_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write_fleet(tmp_path, ["python"])
    assert main(["image", str(path), "--triton-version", "19.01"]) == 1
    assert "no recipe for Triton 19.01: known releases are 24.09, 25.07" in capsys.readouterr().err
    assert main(["image", str(path), "--server", "other"]) == 1
    assert "servers there: fleet" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("image", "release"),
    [
        ("nvcr.io/nvidia/tritonserver:25.07-py3", "25.07"),
        ("mirror.example/nvidia/tritonserver:24.09-py3@sha256:" + "0" * 64, "24.09"),
        ("nvcr.io/nvidia/tritonserver:24.09-cpu-only-py3", "24.09"),
        ("nvcr.io/nvidia/tritonserver:24.10.1-py3", "24.10"),
        ("registry.example/tritonserver-python:24.09", None),  # a slim image of one's own: its name is anything
        ("tritonserver:latest", None),
    ],
)
def test_the_release_an_image_names(image: str, release: str | None) -> None:
    assert image_release(image) == release


def test_the_release_to_compose_is_the_one_asked_else_the_image_s_else_the_default_image_s() -> None:
    assert release_to_compose("nvcr.io/nvidia/tritonserver:24.09-py3", "25.07") == ("25.07", None)
    assert release_to_compose("nvcr.io/nvidia/tritonserver:24.09-py3", None) == ("24.09", None)
    version, note = release_to_compose("registry.example/triton:1", None)
    assert version == image_release(DEFAULT_IMAGE) and note is not None
    assert "registry.example/triton:1" in note and "--triton-version" in note


def _composed_release(text: str) -> str:
    return next(line.split("=", 1)[1] for line in text.splitlines() if line.startswith("ARG TRITON_CONTAINER_VERSION="))


def test_the_cli_composes_from_the_release_of_the_server_s_image(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["image", str(_write_fleet(tmp_path, ["python"]))]) == 0  # the operator's default image
    assert _composed_release(capsys.readouterr().out) == image_release(DEFAULT_IMAGE) == "25.07"
    assert main(["image", str(_write_fleet(tmp_path, ["python"], "nvcr.io/nvidia/tritonserver:24.09-py3"))]) == 0
    assert _composed_release(capsys.readouterr().out) == "24.09"
    assert (
        main(
            [
                "image",
                str(_write_fleet(tmp_path, ["python"], "nvcr.io/nvidia/tritonserver:24.09-py3")),
                "--triton-version",
                "25.07",
            ]
        )
        == 0
    )
    assert _composed_release(capsys.readouterr().out) == "25.07"


def test_the_cli_refuses_a_server_image_s_release_it_has_no_recipe_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write_fleet(tmp_path, ["python"], "nvcr.io/nvidia/tritonserver:24.10-py3")
    assert main(["image", str(path), "--out", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err
    assert (
        "runs nvcr.io/nvidia/tritonserver:24.10-py3: no recipe for Triton 24.10; known releases are 24.09, 25.07"
        in error
    )
    assert "--triton-version" in error
    assert not (tmp_path / "out").exists()


def test_the_cli_says_which_release_it_takes_for_an_image_that_names_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["image", str(_write_fleet(tmp_path, ["python"], "registry.example/tritonserver-python:1"))]) == 0
    captured = capsys.readouterr()
    assert _composed_release(captured.out) == "25.07"
    assert (
        "image registry.example/tritonserver-python:1 does not name its Triton release: composing from 25.07"
        in captured.err
    )


def test_validate_warns_when_the_full_image_serves_a_few_backends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                "validate",
                str(_write_fleet(tmp_path, ["python", "onnxruntime"], "nvcr.io/nvidia/tritonserver:25.07-py3")),
            ]
        )
        == 0
    )
    assert (
        "image nvcr.io/nvidia/tritonserver:25.07-py3 carries 11 backends; the models here use 2 (onnxruntime, python): "
        "`triton-operator image` writes a slim one"
    ) in capsys.readouterr().err


def test_validate_says_nothing_of_a_slim_image_or_of_the_full_one_used_widely(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(_write_fleet(tmp_path, ["python"], "registry.example/tritonserver-slim:1"))]) == 0
    wide = ["python", "onnxruntime", "pytorch", "tensorflow", "openvino", "fil"]
    assert main(["validate", str(_write_fleet(tmp_path, wide, "nvcr.io/nvidia/tritonserver:25.07-py3"))]) == 0
    assert "writes a slim one" not in capsys.readouterr().err


def test_validate_leaves_the_operators_default_image_unwarned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(_write_fleet(tmp_path, ["python"]))]) == 0
    assert "writes a slim one" not in capsys.readouterr().err
