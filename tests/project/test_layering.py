"""Which room of the package may import which, read from the import statements themselves (ast): a
wrong import fails here, before it shows as an import cycle or a slower CLI. And every import inside a
function, each with the reason it is not at the top."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.conftest import ROOT

PACKAGE = ROOT / "operator" / "triton_operator"

# The rooms of ours each may import besides itself; a room not named here may import any but its APART.
MAY_IMPORT: dict[str, set[str]] = {
    "protocol": set(),  # what api/ and render/ on one side and triton/ on the other agree on
    "client": set(),  # runs in clients' processes: importable without the operator
    "api": {"protocol", "speed"},
    "speed": {"protocol"},  # re-implementations for speed: each equals what it stands for (tests/speed/)
    "triton": {"protocol"},
    "decide": {"api", "protocol", "render", "triton", "memory"},  # pure decisions of a pass: see DOES_IO
}
# Two ways of running the operator: neither imports the other.
APART = {"k8s": "local", "local": "k8s"}

# Every import inside a function, and why. Most keep what one command needs out of the others' start-up
# (tests/cli/test_startup.py, bench/cli_startup.py); two are optional extras, missing only where used.
KUBERNETES_SCHEMA = (
    "kubernetes_validate imports jsonschema: loaded when a first object is checked, so `validate` of models starts "
    "without it"
)
IMPORTS_IN_FUNCTIONS: dict[tuple[str, str], tuple[set[str], str]] = {
    ("triton_operator.cli", "_yaml_commands"): (
        {
            "triton_operator.cli.fleet_commands",
            "triton_operator.cli.import_command",
            "triton_operator.cli.placement_table",
        },
        "PyYAML, pydantic, the API's models, protobuf and the rendering: the commands that read or write CRs only, "
        "not --help, local, run, stats or the sidecar",
    ),
    ("triton_operator.cli.serving_commands", "cmd_local"): (
        {
            "asyncio",
            "logging",
            "triton_operator.local.local_access",
            "triton_operator.local.runner",
            "triton_operator.local.tritonserver",
        },
        "asyncio, logging and the gRPC client: `local` only",
    ),
    ("triton_operator.cli.import_command", "cmd_import"): (
        {"google.protobuf", "triton_operator.api.importer", "triton_operator.repository"},
        "the importer, its model folders and protobuf's text-format parser: `import` only",
    ),
    ("triton_operator.cli.import_command", "_completed"): (
        {
            "google.protobuf",
            "triton_operator.api.importer",
            "triton_operator.local.auto_complete",
            "triton_operator.local.tritonserver",
        },
        "the importer and, for models whose config Triton is to complete, a local tritonserver and its gRPC "
        "client: `import` only",
    ),
    ("triton_operator.cli.fleet_commands", "cmd_image"): (
        {"triton_operator.api.security", "triton_operator.image.recipe"},
        "the image recipe: `image` only (security is loaded by then; imported where its warning is given)",
    ),
    ("triton_operator.cli.serving_commands", "cmd_memory_sidecar"): (
        {"triton_operator.memory.sidecar"},
        "aiohttp's web server: the sidecar only",
    ),
    ("triton_operator.memory.nvml", "list_gpu_processes"): (
        {"pynvml"},
        "nvidia-ml-py: the sidecar's GPU reading only; missing, it reads as no NVML",
    ),
    ("triton_operator.cli.serving_commands", "cmd_run"): (
        {"triton_operator.k8s.process.run"},
        "kopf, aiohttp and prometheus_client: `run` only",
    ),
    ("triton_operator.cli.serving_commands", "cmd_stats"): (
        {"asyncio", "triton_operator.cli.stats_command", "triton_operator.triton.client"},
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
    names: tuple[str, ...] = field(default=(), compare=False)  # `from target import names`
    for_types: bool = field(default=False, compare=False)  # under `if TYPE_CHECKING:`: never imported when run


class _Imports(ast.NodeVisitor):
    """The imports of one module, relative ones made absolute, each with the function it is in."""

    def __init__(self, module: str, is_package: bool):
        self.module = module
        self.package = module.split(".") if is_package else module.split(".")[:-1]
        self.scope: list[str] = []
        self.depth = 0  # how many functions enclose the current node
        self.for_types = False
        self.found: list[Import] = []

    def visit_If(self, node: ast.If) -> None:
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            self.for_types = True
            for child in node.body:
                self.visit(child)
            self.for_types = False
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

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
        names = tuple(alias.name for alias in node.names)
        self._add([base] if node.module else (f"{base}.{name}" for name in names), names if node.module else ())

    def _add(self, targets: Iterable[str], names: tuple[str, ...] = ()) -> None:
        function = ".".join(self.scope) if self.depth else ""
        self.found += [Import(self.module, target, function, names, self.for_types) for target in targets]


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
    rooms = {
        path.stem
        for path in PACKAGE.iterdir()
        if path.suffix == ".py" or (path.is_dir() and path.name != "__pycache__")
    }
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


# What does I/O, or runs a framework that does: the decisions (decide/) import none of it, not even
# through a module of ours they import. triton/batching.py takes Triton's statistics messages from
# tritonclient.grpc's service_pb2 (that package loads grpc, but no call of it is made): allowed.
DOES_IO = (
    "kopf",
    "aiohttp",
    "grpc",
    "kubernetes",
    "kubernetes_asyncio",
    "prometheus_client",
    "tritonclient.grpc.aio",
    "tritonclient.http",
    "triton_operator.k8s",
    "triton_operator.local",
    "triton_operator.client",
    "triton_operator.triton.client",
    "triton_operator.triton.sync",
    "triton_operator.triton.probe_requests",
    "triton_operator.triton.health",
    "triton_operator.memory.sidecar",
)
MODULES = {
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    for path in PACKAGE.rglob("*.py")
}


def run_time_imports(module: str) -> set[str]:
    """What importing `module` imports, as named in the import statements (`from package import module`
    counts the module), leaving out what is imported for type checking only or inside a function."""
    targets = set()
    for found in IMPORTS:
        if found.module == module and not found.function and not found.for_types:
            targets.add(found.target)
            targets |= {f"{found.target}.{name}" for name in found.names if f"{found.target}.{name}" in MODULES}
    return targets


def reached_from(room: str) -> dict[str, str]:
    """Every module a room's modules import, theirs and ours, as each of ours imports it: target -> importer."""
    start = sorted(m for m in MODULES if m.startswith(f"{PACKAGE.name}.{room}"))
    reached: dict[str, str] = {}
    todo = list(start)
    while todo:
        module = todo.pop()
        for target in sorted(run_time_imports(module)):
            if target not in reached:
                reached[target] = module
                if target in MODULES:
                    todo.append(target)
    return reached


def does_io(module: str) -> bool:
    return any(module == prefix or module.startswith(f"{prefix}.") for prefix in DOES_IO)


def test_the_walk_sees_what_is_imported_for_type_checking_only() -> None:
    assert any(
        f.module == f"{PACKAGE.name}.decide.seen" and f.target == f"{PACKAGE.name}.triton.sync" and f.for_types
        for f in IMPORTS
    )
    assert f"{PACKAGE.name}.k8s.watch.indexes" in reached_from(
        "k8s"
    ) and f"{PACKAGE.name}.decide.conditions" in run_time_imports(f"{PACKAGE.name}.decide.status_content")


def test_the_decisions_import_nothing_that_does_io() -> None:
    reached = reached_from("decide")
    assert f"{PACKAGE.name}.render.fleet" in reached  # the walk goes through our modules
    wrong = [f"{importer} imports {target}" for target, importer in sorted(reached.items()) if does_io(target)]
    assert not wrong, "\n".join(wrong)


def public_names(room: str) -> dict[str, str]:
    """The names a room's modules define at their top level (functions, classes, constants), but _private ones:
    name -> module."""
    defined = {}
    for path in sorted((PACKAGE / room).rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [
                    e.id
                    for t in targets
                    for e in (t.elts if isinstance(t, ast.Tuple) else [t])
                    if isinstance(e, ast.Name)
                ]
            else:
                continue
            defined |= {name: path.name for name in names if not name.startswith("_")}
    return defined


# A name of decide/ that names another thing in an executing room.
SAME_NAME_OTHER_THING = {"BATCHING_EFFECTIVE": "k8s/process/metrics.py's gauge of that condition"}
# The decisions that lived in k8s/ beside the API calls, and the modules that held them.
MOVED = {
    "begin",
    "judge",
    "assignment",
    "RolloutPlan",
    "Verdict",
    "Pass",
    "ModelOutcome",
    "model_status",
    "pod_condition",
    "server_status",
    "placement_status",
    "placed_condition",
    "memory_figure",
    "merge_conditions",
    "BatchingJudge",
    "keep_last_good",
}
MOVED_MODULES = {"k8s/status.py", "k8s/conditions.py", "k8s/batching.py"}


def test_the_executing_rooms_define_no_decision() -> None:
    decisions = public_names("decide")
    assert decisions.keys() >= MOVED
    for room in APART:
        again = sorted(
            f"{name} ({decisions[name]} and {room}/{module})"
            for name, module in public_names(room).items()
            if name in decisions and name not in SAME_NAME_OTHER_THING
        )
        assert not again, f"defined in decide/ and again in {room}/: {', '.join(again)}"
    assert not [path for path in MOVED_MODULES if (PACKAGE / path).exists()]


def test_no_two_modules_share_a_name() -> None:
    """A module's name alone says which it is (in a traceback, a grep, a review), whatever its package."""
    names: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "__init__.py":
            names.setdefault(path.name, []).append(str(path.relative_to(PACKAGE)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}


MAX_MODULE_LINES = 400


def test_no_module_is_over_400_lines() -> None:
    """A module a reader takes in whole: one responsibility, split by what it decides or does when it grows."""
    lines = {str(path.relative_to(PACKAGE)): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    assert {path: count for path, count in lines.items() if count > MAX_MODULE_LINES} == {}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for target in sorted(edges.get(module, ())):
            if target not in order:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], order[target])
        if low[module] == order[module]:
            group = []
            while (member := stack.pop()) != module:
                group.append(member)
            if group:
                found.append(sorted([module, *group]))

    for module in sorted(edges):
        if module not in order:
            visit(module)
    return found


def test_no_import_cycle_not_even_one_closed_for_type_checking_or_in_a_function() -> None:
    edges: dict[str, set[str]] = {}
    for found in IMPORTS:
        target = found.target if found.target in MODULES else found.target.rsplit(".", 1)[0]
        if target in MODULES and target != found.module:
            edges.setdefault(found.module, set()).add(target)
        edges.setdefault(found.module, set()).update(
            f"{found.target}.{name}" for name in found.names if f"{found.target}.{name}" in MODULES
        )
    assert _cycles(edges) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _top(folder: str) -> list[str]:
    """The modules and packages at the top of one of our folders, its __init__ and __main__ left out."""
    return sorted(
        path.stem if path.suffix == ".py" else path.name
        for path in (PACKAGE / folder).iterdir()
        if (path.suffix == ".py" and path.stem not in {"__init__", "__main__"})
        or (path.is_dir() and (path / "__init__.py").exists())
    )


def test_rooms_stay_small_enough_to_name() -> None:
    """k8s/ has at most 12 modules and rooms at its top; the package at most 3 modules outside any room."""
    assert len(_top("k8s")) <= 12, _top("k8s")
    loose = [path.name for path in PACKAGE.glob("*.py") if path.stem != "__init__"]
    assert len(loose) <= 3, loose


def test_each_module_name_says_which_file_to_open() -> None:
    """No two modules share a file name: a reader who knows the name knows the file."""
    stems: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.stem not in {"__init__", "__main__"}:
            stems.setdefault(path.stem, []).append(str(path.relative_to(PACKAGE)))
    assert not {stem: paths for stem, paths in stems.items() if len(paths) > 1}


def test_each_speed_module_has_its_equivalence_test_and_names_its_figure() -> None:
    """Code that exists only for speed sits in speed/, each module beside a test that it equals what it stands
    for, and its docstring says where its figure is recorded."""
    modules = sorted(path for path in (PACKAGE / "speed").glob("*.py") if path.stem != "__init__")
    assert modules
    for path in modules:
        assert (ROOT / "tests" / "speed" / f"test_{path.stem}.py").exists(), path.name
        assert "bench/RESULTS.md" in (ast.get_docstring(ast.parse(path.read_text())) or ""), path.name
