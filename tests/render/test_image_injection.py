"""The Dockerfile `triton-operator image` writes holds words that TritonServers and TritonModels give
(backends, repository agents, caches, model and server names): whoever writes those CRs must not write
instructions into it. Every such field filled with hostile strings is refused by the API's patterns (the
CRD's as well), by `validate` and by `image`, and the Dockerfile writer itself refuses any name it does not
know; what it writes from known names, parsed back, has exactly the instructions expected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import run
from tests.support.crd_check import crd_errors
from tests.support.dockerfile import instructions_in, logical_lines
from triton_operator.api.server import FULL_IMAGE_BACKENDS
from triton_operator.image.recipe import (
    KNOWN_CACHES,
    KNOWN_REPOSITORY_AGENTS,
    RELEASES,
    ImageContents,
    dockerfile,
    image_problems,
)

# Each would add an instruction, a build stage or a COPY source where a name is written.
HOSTILE = [
    "onnxruntime\nRUN touch /PWNED",
    "x /etc/shadow\nFROM busybox\nRUN touch /PWNED",
    "python \\",  # continues the COPY onto the next line, which then is its arguments
    "python /etc/shadow",  # a second COPY source
    "python\rRUN touch /PWNED",
    "../../../etc",
    "$HOME",  # Docker expands variables in COPY
    "python --from=busybox",
]


def _documents(
    backends: list[str], model_backend: str = "python", agent: str | None = None, extra_args: list[str] | None = None
) -> list[dict[str, Any]]:
    config: dict[str, Any] = {
        "backend": model_backend,
        "maxBatchSize": 0,
        "input": [{"name": "IN", "dataType": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "OUT", "dataType": "TYPE_FP32", "dims": [4]}],
        "responseCache": {"enable": True},
    }
    if agent is not None:
        config["modelRepositoryAgents"] = {"agents": [{"name": agent}]}
    server = {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonServer",
        "metadata": {"name": "fleet", "namespace": "default"},
        "spec": {"backends": backends, "modelRepository": {"uri": "s3://models/fleet"}, "extraArgs": extra_args or []},
    }
    model = {
        "apiVersion": "triton-operator.io/v1alpha1",
        "kind": "TritonModel",
        "metadata": {"name": "m", "namespace": "default"},
        "spec": {"serverRef": {"name": "fleet"}, "config": config},
    }
    return [server, model]


# The field a hostile string is put in: the documents carrying it, the finding's path, and which
# document's schema the API server refuses it by (None: a value of the item before, which CEL cannot see).
FIELDS = {
    "spec.backends": (lambda h: _documents(["python", h]), "spec.backends.1", 0),
    "spec.config.backend": (lambda h: _documents(["python", h], model_backend=h), "spec.config.backend", 1),
    "spec.config.modelRepositoryAgents": (
        lambda h: _documents(["python"], agent=h),
        "spec.config.modelRepositoryAgents.agents[0].name",
        1,
    ),
    "--cache-config=": (
        lambda h: _documents(["python"], extra_args=[f"--cache-config={h},size=1"]),
        "spec.extraArgs",
        0,
    ),
    "--cache-config value": (
        lambda h: _documents(["python"], extra_args=["--cache-config", f"{h},size=1"]),
        "spec.extraArgs",
        None,
    ),
}


def _write(tmp_path: Path, documents: list[dict[str, Any]]) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    return path


@pytest.mark.parametrize("hostile", HOSTILE)
@pytest.mark.parametrize("field", FIELDS)
def test_a_hostile_string_in_any_field_the_dockerfile_holds_is_refused(
    field: str, hostile: str, tmp_path: Path
) -> None:
    documents_of, path, refused_by_schema = FIELDS[field]
    documents = documents_of(hostile)
    files = _write(tmp_path, documents)
    code, _, err = run("validate", str(files))
    assert code == 1 and f"{path}" in err, err
    code, out, err = run("image", str(files), "--out", str(tmp_path / "out"))
    assert code == 1 and out == "" and not (tmp_path / "out").exists(), err
    if refused_by_schema is not None:
        assert crd_errors(documents[refused_by_schema]), "the API server would accept it"


def test_the_same_fleet_with_names_writes_its_dockerfile(tmp_path: Path) -> None:
    """The fleet the hostile cases start from is itself accepted: what refuses them is the hostile string."""
    for documents in (
        _documents(["python", "onnxruntime"], model_backend="onnxruntime", agent="checksum"),
        _documents(["python"], extra_args=["--cache-config", "redis,host=cache"]),
    ):
        code, out, err = run("image", str(_write(tmp_path, documents)))
        assert code == 0, err
        assert all(line.split(None, 1)[0] in _INSTRUCTIONS for line in logical_lines(out))


_INSTRUCTIONS = {"ARG", "FROM", "ENV", "LABEL", "RUN", "WORKDIR", "COPY", "ENTRYPOINT"}
_CLEAN = ImageContents({"python": ["m"]}, {"local": ["m"]}, {"checksum": ["m"]})


def _with(where: str, hostile: str) -> tuple[str, ImageContents]:
    """The clean contents (and server) with `hostile` in one place."""
    if where == "server":
        return hostile, _CLEAN
    if where == "model":
        return "TritonServer/default/fleet", ImageContents({"python": [hostile]}, {}, {})
    contents = {"backends": {"python": ["m"]}, "caches": {"local": ["m"]}, "repoagents": {"checksum": ["m"]}}
    contents[where] = {**contents[where], hostile: []}
    return "TritonServer/default/fleet", ImageContents(**contents)


# Where the writer is given a name it does not know: a name that is not one, or one NVIDIA's full image lacks.
UNKNOWN_NAMES = [
    (where, name) for where in ("backends", "caches", "repoagents") for name in [*HOSTILE, "vllm", "tensorrtllm"]
]
# And a line break in the header's comments, where a model's or the server's name is written.
BROKEN_COMMENTS = [(where, name) for where in ("model", "server") for name in HOSTILE if "\n" in name or "\r" in name]


@pytest.mark.parametrize(("where", "hostile"), UNKNOWN_NAMES + BROKEN_COMMENTS)
def test_the_dockerfile_writer_refuses_what_it_does_not_know(where: str, hostile: str) -> None:
    """Defense in depth: whatever reached the writer unchecked, it writes only names it knows (a backend of
    NVIDIA's full image, its repository agent and caches) and no line break into its header."""
    server, contents = _with(where, hostile)
    with pytest.raises(ValueError, match="refus"):
        dockerfile(server, contents, RELEASES["25.07"], gpu=True)
    if where not in ("model", "server"):
        assert any(repr(hostile) in problem for problem in image_problems(contents, gpu=True))


_COMPONENT_FOLDERS = ("/opt/tritonserver/backends", "/opt/tritonserver/repoagents", "/opt/tritonserver/caches")


def _stage_copies(text: str) -> set[tuple[str, str]]:
    """(source, destination) of every COPY of a backend, agent or cache folder."""
    copies = set()
    for copy in instructions_in(text, "COPY"):
        source, destination = [word for word in copy.split() if not word.startswith("--")]
        if source.rsplit("/", 1)[0] in _COMPONENT_FOLDERS:
            copies.add((source, destination))
    return copies


@pytest.mark.parametrize("release", RELEASES)
def test_every_known_name_is_one_copy_from_the_full_image_and_nothing_else(release: str) -> None:
    """Parsed back, the Dockerfile of everything `image` knows: its instructions, one COPY per backend, agent and
    cache, from the full image's folder of that name into the same, and a header of comments only."""
    contents = ImageContents(
        {backend: ["m"] for backend in FULL_IMAGE_BACKENDS},
        {cache: ["m"] for cache in KNOWN_CACHES},
        {agent: ["m"] for agent in KNOWN_REPOSITORY_AGENTS},
    )
    text = dockerfile("TritonServer/default/fleet", contents, RELEASES[release], gpu=True)
    assert {line.split(None, 1)[0] for line in logical_lines(text)} <= _INSTRUCTIONS
    container = RELEASES[release].container
    assert instructions_in(text, "FROM") == [
        f"nvcr.io/nvidia/tritonserver:{container}-py3 AS full",
        f"nvcr.io/nvidia/tritonserver:{container}-py3-min",
    ]
    expected = {
        (f"/opt/tritonserver/{kind}/{name}", f"/opt/tritonserver/{kind}/{name}")
        for kind, names in (
            ("backends", FULL_IMAGE_BACKENDS),
            ("repoagents", KNOWN_REPOSITORY_AGENTS),
            ("caches", KNOWN_CACHES),
        )
        for name in names
    }
    assert _stage_copies(text) == expected
    header = text.split("\nARG ", 1)[0]
    assert all(line.startswith("#") for line in header.splitlines())
