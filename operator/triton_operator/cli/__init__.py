"""`triton-operator crds | validate | place | import | render | image | local | stats | run`.

Exit codes: 0 done (warnings allowed), 1 the input has errors (each printed, all in one run) or, for
`place`, a model no server has room for, 2 the command could not run (bad usage, a local server that
cannot start or died, anything unexpected).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from ..api.object_names import DEFAULT_SERVER, server_name_problem
from ..protocol.names import READER_PORT
from ..render.args import GRPC_PORT, HTTP_PORT, METRICS_PORT
from .serving_commands import cmd_local, cmd_memory_sidecar, cmd_run, cmd_stats

Command = Callable[[argparse.Namespace], int]


def _folder(name: str) -> Path:
    """An argument naming a folder that exists (argparse says so in its usage error otherwise)."""
    if not Path(name).is_dir():
        raise argparse.ArgumentTypeError(f"{name} is not a folder")
    return Path(name)


def _server_name(name: str) -> str:
    """A TritonServer name the API server takes (argparse says why not in its usage error)."""
    if problem := server_name_problem(name):
        raise argparse.ArgumentTypeError(problem)
    return name


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="triton-operator", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    root.add_argument("--debug", action="store_true", help="show the traceback of an unexpected error")
    commands = root.add_subparsers(dest="command", required=True)

    crds = commands.add_parser("crds", help="write the CRDs (crds/ and the chart's copy) from the API")
    crds.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff if they drifted")
    crds.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
    crds.set_defaults(run=_yaml_command)

    validate = commands.add_parser("validate", help="check TritonServer/TritonModel YAML files")
    validate.add_argument("files", nargs="+", help="YAML files or folders (ConfigMaps in them supply model files)")
    validate.set_defaults(run=_yaml_command)

    place = commands.add_parser(
        "place",
        help="which server each model with a serverSelector takes, by memory; the room left on each server",
        description="Offline, as the operator places them: each model with a serverSelector on the matching server "
        "with the least room that still holds it, largest first, no server given more than its capacity; models "
        "naming their server count there. Exit 1 when the files have errors or a model fits on no server.",
    )
    place.add_argument("files", nargs="+", help="YAML files or folders: the TritonServers and their TritonModels")
    place.add_argument(
        "-o", "--output", choices=["table", "json"], default="table", help="a table (default) or JSON for scripts"
    )
    place.set_defaults(run=_yaml_command)

    render = commands.add_parser("render", help="write config.pbtxt per model and the Kubernetes manifests")
    render.add_argument("files", nargs="+", help="YAML files or folders")
    render.add_argument("--out", type=Path, required=True, help="output folder")
    render.add_argument(
        "--control-key",
        default=None,
        help="value of the control key in the rendered Secret (default: none; the Secret is a placeholder the "
        "operator fills)",
    )
    render.add_argument(
        "--shm-key",
        default=None,
        help="value of the shared-memory key in the rendered Secret (default: none; the Secret is a placeholder the "
        "operator fills)",
    )
    render.set_defaults(run=_yaml_command)

    local = commands.add_parser(
        "local", help="serve the CRs with a real local tritonserver and keep it in sync with the files"
    )
    local.add_argument(
        "paths",
        nargs="*",
        help="YAML files or folders: one TritonServer, its TritonModels and their ConfigMaps (optional with "
        "--model-repository)",
    )
    local.add_argument("--server", default=None, help="which TritonServer to run when the files hold several")
    local.add_argument("--http-port", type=int, default=HTTP_PORT, help=f"(default: {HTTP_PORT}, as a pod's)")
    local.add_argument("--grpc-port", type=int, default=GRPC_PORT, help=f"(default: {GRPC_PORT}, as a pod's)")
    local.add_argument("--metrics-port", type=int, default=METRICS_PORT, help=f"(default: {METRICS_PORT}, as a pod's)")
    local.add_argument(
        "--model-repository",
        type=_folder,
        default=None,
        help="a Triton model repository, served as its folders are (an edit of a model's files reloads it) and "
        "standing in for the server's modelRepository (its PVC or bucket); a model the CR files name too is served as "
        "its CR says",
    )
    lock = local.add_mutually_exclusive_group()
    lock.add_argument(
        "--control-key",
        default=None,
        help="lock the administrative APIs as in a pod: this key for the control, model-config, statistics, trace and "
        "logging APIs (default: a key made at start, printed and saved in WORKDIR/control-key, for the control, trace "
        "and logging APIs)",
    )
    lock.add_argument(
        "--open-control-api",
        action="store_true",
        help="no key: any user of this machine may load models (running their code as you) and change the server",
    )
    local.add_argument(
        "--shm-key",
        default=None,
        help="the key shared-memory registration answers to (default: with --control-key a random one, else none: "
        "shared memory is open to local clients)",
    )
    local.add_argument(
        "--once", action="store_true", help="sync, send one sample request per model, print the table and exit"
    )
    local.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where Triton's backends, models and log go: a new or empty folder, which local marks as its own (a "
        "folder holding anything else is refused), or one it made before (default: a temporary folder)",
    )
    local.set_defaults(run=cmd_local)

    image = commands.add_parser(
        "image",
        help="a Dockerfile per TritonServer for a Triton image with only the backends, caches and agents its models "
        "use",
        description="Composed as Triton's compose.py does: NVIDIA's full image as a build stage, its -min image as "
        "the base. Build it, push it, then set the server's spec.image and spec.backends (see the README).",
    )
    image.add_argument("files", nargs="+", help="YAML files or folders: the TritonServers and their TritonModels")
    image.add_argument("--server", default=None, help="only this TritonServer (default: every one in the files)")
    image.add_argument(
        "--triton-version",
        default=None,
        help="NVIDIA's Triton release to compose from, one `image` has a recipe for (an unknown one is refused with "
        "the list); default: the one the server's spec.image names, else that of the operator's default image",
    )
    device = image.add_mutually_exclusive_group()
    device.add_argument(
        "--gpu", dest="gpu", action="store_true", default=True, help="a GPU image, from the -py3 images (default)"
    )
    device.add_argument(
        "--cpu",
        dest="gpu",
        action="store_false",
        help="a CPU-only image on Ubuntu, from the -cpu-only-py3 full image (compose.py's name for it)",
    )
    image.add_argument(
        "--only-used",
        action="store_true",
        help="only the backends the models use (default: every backend in the server's spec.backends)",
    )
    image.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write <server>.Dockerfile here, one per server (default: stdout, one server)",
    )
    image.set_defaults(run=_yaml_command)

    run = commands.add_parser(
        "run",
        help="run the operator against a cluster (kubeconfig or in-cluster); settings from TRITON_OPERATOR_* variables",
        description="The operator against a cluster: in a pod with its service account, elsewhere with the kubeconfig "
        "(KUBECONFIG or ~/.kube/config). Settings come from TRITON_OPERATOR_* environment variables (see README).",
    )
    scope = run.add_mutually_exclusive_group(required=True)
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    scope.add_argument("-n", "--namespace", action="append", default=[], help="watch this namespace (repeatable)")
    run.set_defaults(run=cmd_run)

    stats = commands.add_parser(
        "stats", help="is batching working? Triton's statistics and a verdict per model, for any running Triton"
    )
    stats.add_argument("url", help="Triton's gRPC (host:port, grpc://host:port) or HTTP (http://host:port) endpoint")
    stats.add_argument("model", nargs="?", default="", help="one model (default: every loaded model)")
    stats.add_argument(
        "--watch", action="store_true", help="after the counters since load, print what changed every --interval"
    )
    stats.add_argument("--interval", type=float, default=10.0, help="seconds between reads with --watch (default: 10)")
    stats.add_argument(
        "--key",
        default=os.environ.get("TRITON_OPERATOR_CONTROL_KEY"),
        help="the server's control key, which statistics and model configs answer to (default: "
        "$TRITON_OPERATOR_CONTROL_KEY; kubectl get secret <server>-control -o jsonpath='{.data.control-key}' | base64 "
        "-d)",
    )
    stats.set_defaults(run=cmd_stats)

    sidecar = commands.add_parser(
        "memory-sidecar",
        help="serve this pod's python stubs' memory from /proc for the operator (the TritonServer's memoryReader "
        "sidecar)",
    )
    sidecar.add_argument("--host", default="0.0.0.0", help="address to listen on (default: every one of the pod's)")
    sidecar.add_argument("--port", type=int, default=READER_PORT, help=f"port (default: {READER_PORT})")
    sidecar.set_defaults(run=cmd_memory_sidecar)

    importer = commands.add_parser(
        "import",
        help="TritonModels (and ConfigMaps with their files) from a Triton model repository, one model folder or one "
        "config.pbtxt",
        description="A repository (a folder of model folders) also gets the TritonServer that runs its models. A "
        "model whose files are more than a ConfigMap holds (1 MiB) loads from the server's modelRepository: the "
        "output says what to put there.",
    )
    importer.add_argument(
        "path", help="a model repository, a model folder (config.pbtxt, 1/model.py, ...) or a config.pbtxt"
    )
    importer.add_argument(
        "--server",
        type=_server_name,
        default=DEFAULT_SERVER,
        help=f"TritonServer the models run on (default: {DEFAULT_SERVER})",
    )
    importer.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write one YAML file per model (and the server) here (default: all to stdout)",
    )
    importer.add_argument(
        "--no-complete",
        action="store_true",
        help="import configs as written, without a local tritonserver completing them (a model without config.pbtxt "
        "is skipped)",
    )
    importer.set_defaults(run=_yaml_command)
    return root


def _yaml_command(args: argparse.Namespace) -> int:
    """The commands that read or write CRs (crds, validate, place, render, image, import): PyYAML, the API
    and the rendering are imported when one of them runs, so --help and the other commands start without them."""
    return _yaml_commands(args.command)(args)


def _yaml_commands(name: str) -> Command:
    if name == "place":
        from .placement_table import cmd_place

        return cmd_place
    if name == "import":
        from .import_command import cmd_import

        return cmd_import
    from .fleet_commands import cmd_crds, cmd_image, cmd_render, cmd_validate

    commands: dict[str, Command] = {
        "crds": cmd_crds,
        "validate": cmd_validate,
        "render": cmd_render,
        "image": cmd_image,
    }
    return commands[name]


def main(argv: Sequence[str] | None = None) -> int:
    """Runs a command; anything unexpected is one line and exit code 2 (--debug shows the traceback).

    Without argv it runs the process's own command line (the console script, `python -m`): what it
    loads before the command starts (modules, classes, functions) lives until the process exits, so no
    collection runs while it loads, and it is then frozen out of the garbage collector's reach: neither
    the collections that follow nor the interpreter's exit walk it again."""
    if argv is None:
        gc.disable()
    args = parser().parse_args(argv)
    try:
        command = _yaml_commands(args.command) if args.run is _yaml_command else args.run
        if argv is None:
            gc.freeze()
            gc.enable()
        status: int = command(args)
        return status
    except Exception as error:  # the one place every unexpected error ends, as a line, not a traceback
        if args.debug:
            traceback.print_exc()
        print(
            f"triton-operator {args.command}: unexpected error: {type(error).__name__}: {error} (--debug shows where)",
            file=sys.stderr,
        )
        return 2
