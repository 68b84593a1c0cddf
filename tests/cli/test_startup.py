"""What `validate` loads and builds decides how fast the CLI starts (bench/cli_startup.py): the packages
a command does not use stay out (checked by what a fresh interpreter has loaded, not by a timing), the
API's models are written the way pydantic creates them cheapest, and the process's own command line
keeps the garbage collector off what it loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

from tests.conftest import EXAMPLES, ROOT
from triton_operator.api import resources

# None is needed to check or render files. The packages cost tens of milliseconds or more to import;
# the importer's modules (the `import` command's) a few, with dataclasses Python builds at import.
NOT_FOR_VALIDATE = [
    "asyncio",
    "grpc",
    "jsonschema",
    "kubernetes",
    "logging",
    "numpy",
    "tritonclient.grpc",
    "tritonclient.utils",
    "triton_operator.api.importer",
    "triton_operator.cli.placement_table",
    "triton_operator.image.recipe",
    "triton_operator.memory.attribution",
    "triton_operator.memory.nvml",
    "triton_operator.repository",
]
# What the parser (`--help`, a usage error) and the commands that read no CR files start without.
NOT_FOR_THE_PARSER = [
    "google.protobuf",
    "pydantic",
    "triton_operator.api.resources",
    "triton_operator.cli.fleet_commands",
    "triton_operator.render.fleet",
    "yaml",
]


def _loaded_after(code: str, modules: list[str] = NOT_FOR_VALIDATE) -> list[str]:
    """The `modules` that a fresh interpreter has loaded after running `code`."""
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(m for m in {modules!r} if m in sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(result.stdout.splitlines()[-1])


def test_validate_of_a_model_imports_none_of_the_heavy_packages() -> None:
    assert (
        _loaded_after(f"from triton_operator.cli import main\nmain(['validate', {str(EXAMPLES / 'add-sub.yaml')!r}])")
        == []
    )


def test_validate_of_a_server_imports_none_of_them_either() -> None:
    assert (
        _loaded_after(f"from triton_operator.cli import main\nmain(['validate', {str(EXAMPLES / 'server.yaml')!r}])")
        == []
    )


def test_validate_of_a_server_passing_kubernetes_objects_to_its_pod_adds_only_the_kubernetes_schema_check(
    tmp_path: Path,
) -> None:
    server = tmp_path / "server.yaml"
    server.write_text((EXAMPLES / "server.yaml").read_text() + "  pod: {tolerations: [{key: gpu, operator: Exists}]}\n")
    assert _loaded_after(f"from triton_operator.cli import main\nassert main(['validate', {str(server)!r}]) == 0") == [
        "jsonschema"
    ]


def test_the_parser_loads_neither_pydantic_nor_the_api() -> None:
    """`--help`, and commands that read no CR files, start without what reading them needs."""
    code = "from triton_operator.cli import parser\nparser().parse_args(['stats', 'localhost:8001'])"
    assert _loaded_after(code, NOT_FOR_THE_PARSER) == []


def test_tritonclient_gets_the_same_model_config_module() -> None:
    code = (
        "from triton_operator.protocol.triton_proto import model_config_pb2 as ours\n"
        "import tritonclient.grpc as grpcclient\n"
        "from tritonclient.grpc import model_config_pb2, service_pb2\n"
        "assert model_config_pb2 is ours and grpcclient.model_config_pb2 is ours\n"
        "assert service_pb2.ModelConfigResponse().config.__class__ is ours.ModelConfig"
    )
    assert "tritonclient.grpc" in _loaded_after(code)


def _subclasses(model: type[BaseModel]) -> list[type[BaseModel]]:
    return [model] + [each for subclass in model.__subclasses__() for each in _subclasses(subclass)]


def _api_models() -> list[type[BaseModel]]:
    """Every model of the API (the two kinds and all they hold)."""
    models = [model for model in _subclasses(BaseModel) if model.__module__.startswith("triton_operator.api.")]
    assert {resources.TritonServer, resources.TritonModel, resources.ObjectMeta} <= set(models)
    return models


def test_the_api_models_annotations_are_objects_not_strings() -> None:
    """pydantic compiles and evaluates each string annotation (`from __future__ import annotations` in a
    module of models) once for every field: about 1% of validate's instructions."""
    written_as_strings = [
        f"{model.__module__}.{model.__qualname__}.{name}"
        for model in _api_models()
        for name, annotation in model.__annotations__.items()
        if isinstance(annotation, str)
    ]
    assert written_as_strings == []


def test_no_api_field_has_a_builtin_as_its_default_factory() -> None:
    """pydantic asks each default_factory's signature whether it takes the validated data; a builtin's
    (list, dict) is parsed from its text by the tokenizer: about 2% of validate's instructions. An empty
    list or dict is the default itself (pydantic copies it for each object)."""
    builtin_factories = [
        f"{model.__module__}.{model.__qualname__}.{name}"
        for model in _api_models()
        for name, field in model.model_fields.items()
        if isinstance(field.default_factory, type) and field.default_factory.__module__ == "builtins"
    ]
    assert builtin_factories == []


def test_the_process_own_command_line_freezes_what_is_loaded_and_a_caller_of_main_keeps_its_collector_as_is() -> None:
    model = str(EXAMPLES / "add-sub.yaml")
    code = (
        "import gc, sys\n"
        "from triton_operator.cli import main\n"
        f"main(['validate', {model!r}])\n"
        "called = gc.get_freeze_count()\n"
        f"sys.argv = ['triton-operator', 'validate', {model!r}]\n"
        "main()\n"
        "print(called, gc.get_freeze_count())"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    called, run = map(int, result.stdout.split()[-2:])
    assert called == 0 and run > 10_000
