"""Which room of the package may import which, read from the import statements themselves (ast): a
wrong import fails here, before it shows as an import cycle or a slower CLI. And every import inside a
function, each with the reason it is not at the top."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

from tests.conftest import ROOT

PACKAGE = ROOT / "operator" / "triton_operator"

# The rooms of ours each may import besides itself; a room not named here may import any but its APART.
MAY_IMPORT: dict[str, set[str]] = {
    "protocol": set(),  # what api/ and render/ on one side and triton/ on the other agree on
    "client": set(),  # runs in clients' processes: importable without the operator
    "api": {"protocol"},
    "triton": {"protocol"},
}
# Two ways of running the operator: neither imports the other.
APART = {"k8s": "local", "local": "k8s"}

# Every import inside a function, and why. Most keep what one command needs out of the others' start-up
# (tests/test_startup.py, bench/cli_startup.py); two are optional extras, missing only where used.
KUBERNETES_SCHEMA = (
    "kubernetes_validate imports jsonschema: loaded when a first object is checked, so `validate` of models starts without it"
)
IMPORTS_IN_FUNCTIONS: dict[tuple[str, str], tuple[set[str], str]] = {
    ("triton_operator.cli", "cmd_local"): (
        {"asyncio", "logging", "triton_operator.local.runner", "triton_operator.local.tritonserver"},
        "asyncio, logging and the gRPC client: `local` only",
    ),
    ("triton_operator.cli", "cmd_import"): (
        {"google.protobuf", "triton_operator.api.importer", "triton_operator.repository"},
        "the importer, its model folders and protobuf's text-format parser: `import` only",
    ),
    ("triton_operator.cli", "_completed"): (
        {"google.protobuf", "triton_operator.api.importer", "triton_operator.local.auto_complete", "triton_operator.local.tritonserver"},
        "the importer and, for models whose config Triton is to complete, a local tritonserver and its gRPC client: `import` only",
    ),
    ("triton_operator.cli", "cmd_image"): (
        {"triton_operator.api.security", "triton_operator.render.image"},
        "the image recipe: `image` only (security is loaded by then; imported where its warning is given)",
    ),
    ("triton_operator.cli", "cmd_memory_sidecar"): ({"triton_operator.memory_reader"}, "aiohttp's web server: the sidecar only"),
    ("triton_operator.gpu_memory", "list_gpu_processes"): ({"pynvml"}, "nvidia-ml-py: the sidecar's GPU reading only; missing, it reads as no NVML"),
    ("triton_operator.cli", "cmd_run"): ({"triton_operator.k8s.run"}, "kopf, aiohttp and prometheus_client: `run` only"),
    ("triton_operator.cli", "cmd_stats"): (
        {"asyncio", "triton_operator.stats", "triton_operator.triton.client"},
        "asyncio and Triton's gRPC and HTTP clients: `stats` only",
    ),
    ("triton_operator.render.schema", "_schema_folder"): ({"kubernetes_validate.utils"}, KUBERNETES_SCHEMA),
    ("triton_operator.render.schema", "_definitions"): ({"kubernetes_validate.utils"}, KUBERNETES_SCHEMA),
    ("triton_operator.render.schema", "_validator"): (
        {"jsonschema", "kubernetes_validate", "kubernetes_validate.utils", "referencing"},
        KUBERNETES_SCHEMA,
    ),
    ("triton_operator.client.regions", "CudaRegions.__init__"): (
        {"tritonclient.utils.cuda_shared_memory"},
        "needs cuda-python (tritonclient[cuda]), which system shared memory does without",
    ),
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module: triton_operator.render.config
    target: str  # what it imports, absolute: triton_operator.protocol.desired, grpc
    function: str = ""  # the function it is in (Class.method), "" outside any


class _Imports(ast.NodeVisitor):
    """The imports of one module, relative ones made absolute, each with the function it is in."""

    def __init__(self, module: str, is_package: bool):
        self.module = module
        self.package = module.split(".") if is_package else module.split(".")[:-1]
        self.scope: list[str] = []
        self.depth = 0  # how many functions enclose the current node
        self.found: list[Import] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        self._add(alias.name for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = ".".join(self.package[: len(self.package) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        # `from . import args`: the names are modules of that package.
        self._add([base] if node.module else (f"{base}.{alias.name}" for alias in node.names))

    def _add(self, targets: Iterable[str]) -> None:
        function = ".".join(self.scope) if self.depth else ""
        self.found += [Import(self.module, target, function) for target in targets]


def package_imports() -> list[Import]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        walker = _Imports(".".join(parts[:-1] if is_package else parts), is_package)
        walker.visit(ast.parse(path.read_text(), str(path)))
        found += walker.found
    return found


def room(module: str) -> str | None:
    """The room of one of our modules (api, render, cli, ...); None for anything not ours."""
    parts = module.split(".")
    if parts[0] != PACKAGE.name:
        return None
    return parts[1] if len(parts) > 1 else parts[0]


IMPORTS = package_imports()


def test_the_walk_resolves_relative_imports_and_finds_every_room() -> None:
    assert Import("triton_operator.render.config", "triton_operator.protocol.desired") in IMPORTS
    assert Import("triton_operator.render.manifests", "triton_operator.render.args") in IMPORTS
    rooms = {path.stem for path in PACKAGE.iterdir() if path.suffix == ".py" or (path.is_dir() and path.name != "__pycache__")}
    assert MAY_IMPORT.keys() | APART.keys() <= rooms


def test_each_room_imports_only_the_rooms_it_may() -> None:
    wrong = []
    for found in IMPORTS:
        importer, imported = room(found.module), room(found.target)
        if imported is None or imported == importer:
            continue
        allowed = MAY_IMPORT.get(importer)
        if (allowed is not None and imported not in allowed) or APART.get(importer) == imported:
            wrong.append(f"{found.module} imports {found.target}")
    assert not wrong, "\n".join(wrong)


def test_every_import_in_a_function_is_listed_with_its_reason() -> None:
    in_functions: dict[tuple[str, str], set[str]] = {}
    for found in IMPORTS:
        if found.function:
            in_functions.setdefault((found.module, found.function), set()).add(found.target)
    listed = {place: targets for place, (targets, _reason) in IMPORTS_IN_FUNCTIONS.items()}
    assert in_functions == listed, "list each import in a function with its reason, or move it to the top"
