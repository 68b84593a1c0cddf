"""Triton's auto-complete for `triton-operator import`: a local tritonserver completes the configs of the
models that need it, the way Triton would complete them on a server where auto-complete is on.

The operator's servers run with `--disable-auto-complete-config` (a python model loads much faster
without it, docs/triton-facts.md, and the operator always sends a whole config), so a model that leaves
its inputs and outputs to model.py's `auto_complete_config` must have them written into its TritonModel.
One tritonserver, with auto-complete on and explicit model control, loads each model once from a copy
of its folder, answers its completed config, and unloads it; it runs in its own process group and
leaves no /dev/shm region behind (LocalTriton).
"""

from __future__ import annotations

import secrets
import shutil
import socket
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tritonclient.grpc as grpcclient
from google.protobuf import text_format
from tritonclient.utils import InferenceServerException

from ..api.config_json import ModelConfig
from ..api.importer import ModelFolder
from ..api.server import TritonServerSpec
from ..protocol.names import GRPC_CONTROL_METADATA
from ..protocol.triton_proto import model_config_pb2
from .tritonserver import LocalTriton, Ports, TritonFailed

ADDRESS = "127.0.0.1"
PORT_TRIES = 3  # another process may take a free port between its pick and Triton's start
# A load runs model.py's initialize too: models that read their weights take a while.
LOAD_TIMEOUT_SECONDS = 600


@dataclass(frozen=True)
class Completion:
    config: ModelConfig | None  # what Triton completed, or None where it could not
    error: str = ""  # Triton's own words for why not


def _free_ports() -> Ports:
    sockets = [socket.socket() for _ in range(3)]
    try:
        for probe in sockets:
            probe.bind((ADDRESS, 0))
        http, grpc, metrics = (probe.getsockname()[1] for probe in sockets)
    finally:
        for probe in sockets:
            probe.close()
    return Ports(http, grpc, metrics)


def _started(workdir: Path, repository: Path) -> LocalTriton:
    """A tritonserver with auto-complete on, on ports free on loopback."""
    for _ in range(PORT_TRIES - 1):
        try:
            return _start(workdir, repository)
        except TritonFailed as error:
            if "in use" not in str(error):
                raise
    return _start(workdir, repository)


def _start(workdir: Path, repository: Path) -> LocalTriton:
    """Its control API answers to a key of its own: another user of the machine loading a model meanwhile
    would run that model's code as you."""
    triton = LocalTriton(
        TritonServerSpec(),
        workdir,
        _free_ports(),
        control_key=secrets.token_urlsafe(32),
        address=ADDRESS,
        model_repository=repository,
        auto_complete=True,
    )
    triton.start()
    return triton


def _write_model(repository: Path, folder: ModelFolder) -> None:
    """The folder under its folder name, its config (if any) without a name: Triton names the model after
    the folder, which is unique in an import where configs' names need not be. The config asks for one CPU
    instance whatever it says: completing needs neither GPUs nor more instances, and the instance groups
    written stay in the CR (api/importer.py's completed_config)."""
    model = repository / folder.folder
    for path, content in folder.files.items():
        (model / path).parent.mkdir(parents=True, exist_ok=True)
        (model / path).write_bytes(content)
    for path in folder.unread:  # too large to have been read: copied from the folder as the copy goes
        (model / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(folder.source) / path, model / path)
    model.mkdir(parents=True, exist_ok=True)
    if folder.config is not None:
        config = text_format.Parse(folder.config, ModelConfig())
        config.ClearField("name")
        config.ClearField("instance_group")
        config.instance_group.add(count=1, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
        (model / "config.pbtxt").write_text(text_format.MessageToString(config))


def _complete(
    client: grpcclient.InferenceServerClient, triton: LocalTriton, folder: ModelFolder, repository: Path
) -> Completion:
    headers = {GRPC_CONTROL_METADATA: str(triton.control_key)}
    try:
        client.load_model(folder.folder, headers=headers, client_timeout=LOAD_TIMEOUT_SECONDS)
    except InferenceServerException as error:
        # Triton answers a failed load with little; the reason is in its log.
        reason = triton.logged_error(folder.folder) or error.message() or str(error)
        where = str(repository / folder.folder)
        reason = reason.replace("\\n", "\n").replace(where, folder.source or folder.folder).strip()
        return Completion(None, reason)
    config = client.get_model_config(folder.folder, headers=headers).config
    client.unload_model(folder.folder, headers=headers)
    return Completion(config)


def complete_configs(folders: Sequence[ModelFolder]) -> list[Completion]:
    """Each folder's config as Triton's auto-complete completes it, in the folders' order. Raises
    TritonNotInstalled where there is no tritonserver, TritonFailed where it cannot start."""
    with tempfile.TemporaryDirectory(prefix="triton-operator-import-") as work:
        workdir = Path(work)
        repository = workdir / "models"
        for folder in folders:
            _write_model(repository, folder)
        triton = _started(workdir, repository)
        try:
            client = grpcclient.InferenceServerClient(triton.grpc_url)
            try:
                return [_complete(client, triton, folder, repository) for folder in folders]
            finally:
                client.close()
        finally:
            triton.stop()
