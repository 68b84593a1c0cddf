"""A worker's pass costs what changed: it renders only models whose inputs changed, and never keeps a
rendering past a change of what it was made from. The worker runs on plain indexes and an API client
that lands its writes in them, as the API server and kopf's watch would (no Kubernetes, no Triton)."""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from google.protobuf.message import Message

from tests.support.resources import FILES, MODEL, SERVER
from triton_operator.k8s.process.settings import Settings
from triton_operator.k8s.server import status_writer
from triton_operator.k8s.server.status_writer import JUDGED_AT_ONCE
from triton_operator.k8s.server.worker import ServerWorker
from triton_operator.k8s.watch.indexes import Indexes, config_map_view, custom_resource
from triton_operator.render import model_rendering

NAMESPACE = "default"
KEY = (NAMESPACE, "triton")
MODELS = 6


class Cluster:
    """The indexes a worker reads, and the API client it writes through: a status written lands in its
    object with a new resourceVersion, an applied ConfigMap in the ConfigMaps' index."""

    def __init__(self, inline: bool = False, models: int = MODELS) -> None:
        """`models` models on the server; with `inline`, the server is the inline one of a model named after it."""
        self.versions = itertools.count(1)
        self.uids = itertools.count(1)
        self.stored: dict[tuple[str, str], dict[str, Any]] = {}
        self.writes: list[str] = []
        bodies = []
        for index in range(models):
            model = copy.deepcopy(MODEL)
            model["metadata"]["name"] = f"model-{index}"
            model["spec"]["config"]["maxBatchSize"] = 1 + index
            bodies.append(self._object(model))
        if inline:
            owner = copy.deepcopy(MODEL)
            owner["metadata"]["name"] = KEY[1]
            owner["spec"] = {
                "server": copy.deepcopy(SERVER["spec"]),
                "config": owner["spec"]["config"],
                "files": owner["spec"]["files"],
            }
            bodies.append(self._object(owner))
        self.indexes = Indexes(
            servers={KEY: [] if inline else [self._object(SERVER)]},  # type: ignore[arg-type]
            models={KEY: bodies},  # type: ignore[arg-type]
            pods={},  # type: ignore[arg-type]
            config_maps={(NAMESPACE, FILES["metadata"]["name"]): [{"data": dict(FILES["data"]), "binaryData": {}}]},  # type: ignore[arg-type]
            models_by_config_map={},  # type: ignore[arg-type]
            selector_models={},  # type: ignore[arg-type]
            replica_sets={},  # type: ignore[arg-type]
            deployments={},  # type: ignore[arg-type]
        )

    def _object(self, document: dict[str, Any]) -> dict[str, Any]:
        body = custom_resource(copy.deepcopy(document))
        body["metadata"].update(
            namespace=NAMESPACE, uid=f"uid-{next(self.uids)}", resourceVersion=str(next(self.versions)), generation=1
        )
        return body

    def _entries(self, kind: str) -> list[dict[str, Any]]:
        return (self.indexes.servers if kind == "TritonServer" else self.indexes.models)[KEY]  # type: ignore[index]

    def change(
        self, kind: str, name: str, spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None
    ) -> None:
        """The object as the next watch event lists it: a new resourceVersion, and a new generation for a spec
        change."""
        entries = self._entries(kind)
        index = next(i for i, body in enumerate(entries) if body["metadata"]["name"] == name)
        body = entries[index]
        metadata = {**body["metadata"], "resourceVersion": str(next(self.versions))}
        if spec is not None:
            metadata["generation"] += 1
        entries[index] = {
            **body,
            "metadata": metadata,
            "spec": spec if spec is not None else body["spec"],
            "status": status if status is not None else body["status"],
        }

    def edit_config_map(self, data: dict[str, str]) -> None:
        self.indexes.config_maps[(NAMESPACE, FILES["metadata"]["name"])] = [{"data": data, "binaryData": {}}]  # type: ignore[index]

    def delete(self, name: str) -> None:
        entries = self._entries("TritonModel")
        entries[:] = [body for body in entries if body["metadata"]["name"] != name]

    def model(self, name: str) -> dict[str, Any]:
        return next(body for body in self._entries("TritonModel") if body["metadata"]["name"] == name)

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.stored.get((kind, name))

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        await self.apply(obj)
        return obj

    async def apply(self, obj: dict[str, Any]) -> None:
        self.stored[(obj["kind"], obj["metadata"]["name"])] = copy.deepcopy(obj)
        self.writes.append(f"{obj['kind']}/{obj['metadata']['name']}")
        if obj["kind"] == "ConfigMap":
            self.indexes.config_maps[(NAMESPACE, obj["metadata"]["name"])] = [config_map_view(obj, named=False)]  # type: ignore[index]
        if obj["kind"] == "TritonServer" and not self.indexes.servers[KEY]:  # type: ignore[index]
            # Made: listed with a uid of its own.
            self.indexes.servers[KEY].append(self._object(obj))  # type: ignore[index]

    async def patch_status(
        self, kind: str, namespace: str, name: str, status: dict[str, Any], replacing: dict[str, Any]
    ) -> None:
        self.writes.append(f"{kind}/{name}/status")
        self.change(kind, name, status=status)


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the models render_model is called for, in order."""
    called: list[str] = []
    render_model = model_rendering.render_model

    def counting(model: Any, server: Any, config_map: Any) -> Any:
        called.append(model.name)
        return render_model(model, server, config_map)

    monkeypatch.setattr(model_rendering, "render_model", counting)
    yield called


@pytest.fixture(autouse=True)
def warnings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The Warning Events the worker posts (kopf posts them only inside a running operator)."""
    posted: list[str] = []
    monkeypatch.setattr(
        kopf,
        "event",
        lambda body, type, reason, message: (
            posted.append(f"{body['metadata']['name']}: {message}") if type == "Warning" else None
        ),
    )
    return posted


def passes(cluster: Cluster) -> tuple[ServerWorker, Any]:
    """The worker, and a coroutine function that runs one pass of it and returns what the pass wrote."""
    worker = ServerWorker(KEY, cluster.indexes, cluster, Settings())  # type: ignore[arg-type]

    async def one_pass(resync: bool = False) -> list[str]:
        cluster.writes.clear()
        if resync:
            worker.children.forget()  # what the resync timer does before its pass
        assert await worker.reconcile() is True
        return list(cluster.writes)

    return worker, one_pass


def revision(cluster: Cluster, name: str) -> str:
    return cluster.model(name)["status"]["configHash"]


def config_valid(cluster: Cluster, name: str) -> dict[str, Any]:
    return next(c for c in cluster.model(name)["status"]["conditions"] if c["type"] == "ConfigValid")


async def test_an_unchanged_fleet_renders_nothing_and_an_edit_renders_only_its_model(renders: list[str]) -> None:
    cluster = Cluster()
    worker, one_pass = passes(cluster)
    first = await one_pass()
    assert sorted(renders) == [f"model-{i}" for i in range(MODELS)]
    assert sum(write.endswith("/status") for write in first) == MODELS + 1  # every model's and the server's
    desired = dict(worker.last_good)

    renders.clear()
    assert await one_pass() == []  # the statuses it wrote came back with new resourceVersions: nothing to do
    assert await one_pass(resync=True) == [
        "Deployment/triton",
        "Service/triton",
        "NetworkPolicy/triton",
    ]  # the resync restores deleted children
    assert renders == []
    assert all(worker.last_good[uid] is model for uid, model in desired.items())  # nothing made again for the pods

    before = revision(cluster, "model-2")
    edited = copy.deepcopy(cluster.model("model-2")["spec"])
    edited["config"]["dynamicBatching"] = {"maxQueueDelayMicroseconds": 250}
    cluster.change("TritonModel", "model-2", spec=edited)
    written = await one_pass()
    assert renders == ["model-2"]
    assert sorted(written) == ["ConfigMap/model-2-config", "TritonModel/model-2/status"]
    assert revision(cluster, "model-2") != before
    assert [uid for uid, model in desired.items() if worker.last_good[uid] is not model] == [
        cluster.model("model-2")["metadata"]["uid"]
    ]


async def test_a_kept_rendering_never_outlives_a_change_of_what_it_read(renders: list[str]) -> None:
    cluster = Cluster()
    _worker, one_pass = passes(cluster)
    await one_pass()
    revisions = {f"model-{i}": revision(cluster, f"model-{i}") for i in range(MODELS)}

    renders.clear()
    cluster.edit_config_map({"model.py": FILES["data"]["model.py"] + "\n# edited\n"})
    await one_pass()
    assert sorted(renders) == sorted(revisions)  # every model with files from it
    assert all(revision(cluster, name) != old for name, old in revisions.items())  # its files are part of the revision

    renders.clear()
    server_spec = copy.deepcopy(cluster.indexes.server(KEY)["spec"])  # type: ignore[index]
    server_spec["backends"] = ["onnxruntime"]  # the models' python backend is no longer there
    cluster.change("TritonServer", "triton", spec=server_spec)
    await one_pass()
    assert sorted(renders) == sorted(revisions)
    assert all(config_valid(cluster, name)["status"] == "False" for name in revisions)

    renders.clear()
    server_spec["backends"] = ["python"]
    cluster.change("TritonServer", "triton", spec=server_spec)
    await one_pass()
    assert all(config_valid(cluster, name)["status"] == "True" for name in revisions)

    renders.clear()
    collides = copy.deepcopy(cluster.model("model-4")["spec"])
    collides["modelName"] = "model-1"  # the Triton name another model serves on this server
    cluster.change("TritonModel", "model-4", spec=collides)
    for _ in range(2):  # refused on the pass that renders it, and on the next that keeps its rendering
        await one_pass()
        assert (
            config_valid(cluster, "model-4")["status"] == "False"
            and "already serves 'model-1'" in config_valid(cluster, "model-4")["message"]
        )
    assert renders == ["model-4"]


async def test_what_is_kept_goes_with_its_model(renders: list[str]) -> None:
    cluster = Cluster()
    worker, one_pass = passes(cluster)
    await one_pass()
    gone = cluster.model("model-3")["metadata"]["uid"]
    cluster.delete("model-3")
    await one_pass()
    assert len(worker.renderings.kept) == len(worker.parses.models) == MODELS - 1
    assert (
        gone not in worker.renderings.kept
        and gone not in worker.parses.models
        and gone not in worker.statuses.unchanged
    )


async def test_an_inline_server_spec_renders_every_model_on_it_again(renders: list[str]) -> None:
    cluster = Cluster(inline=True)
    worker, one_pass = passes(cluster)
    assert await worker.reconcile() is False  # the inline server is made; its children wait for its uid
    await one_pass()
    names = sorted(renders)
    assert names == sorted([KEY[1], *(f"model-{i}" for i in range(MODELS))])

    renders.clear()
    owner = copy.deepcopy(cluster.model(KEY[1])["spec"])
    owner["server"]["backends"] = ["onnxruntime"]  # the python backend the models run on is gone
    cluster.change("TritonModel", KEY[1], spec=owner)
    await one_pass()
    assert sorted(renders) == names  # the owner for its spec, the others for their server's
    assert all(config_valid(cluster, f"model-{i}")["status"] == "False" for i in range(MODELS))


async def test_what_is_kept_for_a_model_holds_no_live_protobuf_message(renders: list[str]) -> None:
    """A live message holds an arena of about 3 KiB for a config of a hundred bytes (bench/RESULTS.md):
    the parse and the rendering kept for each model keep it serialized, and the same file's bytes once."""
    cluster = Cluster()
    worker, one_pass = passes(cluster)
    await one_pass()
    kept = [entry.rendered for entry in worker.renderings.kept.values()]
    parses = [parsed.model for _, parsed in worker.parses.models.values()]
    assert len(kept) == len(parses) == MODELS
    for rendered, model in zip(kept, parses, strict=False):
        assert rendered is not None and model is not None
        assert not any(
            isinstance(value, Message) for value in [*vars(rendered).values(), *vars(rendered.desired).values()]
        )
        assert not any(isinstance(value, Message) for value in vars(model.spec.config).values())
        assert rendered.desired.parsed_config().name == rendered.name  # parsed when asked
    assert len({id(content) for rendered in kept for content in rendered.files.values()}) == 1  # one model.py, shared


async def test_a_pass_over_many_models_hands_the_event_loop_back_while_judging_them() -> None:
    """A resync of a large unchanged server is CPU only: an edit on another server waits for a slice
    of it, not all of it (this API client answers without yielding, so only the pass's own hand-backs count)."""
    cluster = Cluster(models=4 * JUDGED_AT_ONCE)
    _, one_pass = passes(cluster)
    await one_pass()
    turns = 0

    async def other_work() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(other_work())
    await asyncio.sleep(0)
    before = turns
    assert await one_pass() == []
    other.cancel()
    assert turns - before >= 4


async def test_a_pass_that_sees_what_the_last_one_did_judges_no_model_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every status as it should be, and nothing new seen: the models' outcomes are not worked out again
    (a quiet server's resync); any change, here a model's edit, judges them all again."""
    judged: list[str] = []
    outcome_of = status_writer.ModelOutcome.of

    def counting(parsed: Any, *args: Any) -> Any:
        judged.append(parsed.body["metadata"]["name"])
        return outcome_of(parsed, *args)

    monkeypatch.setattr(status_writer.ModelOutcome, "of", counting)
    cluster = Cluster()
    _, one_pass = passes(cluster)
    await one_pass()
    assert await one_pass() == []  # its statuses came back: each found as written, none judged different
    judged.clear()
    assert await one_pass(resync=True) == ["Deployment/triton", "Service/triton", "NetworkPolicy/triton"]
    assert judged == []

    edited = copy.deepcopy(cluster.model("model-2")["spec"])
    edited["config"]["maxBatchSize"] = 64
    cluster.change("TritonModel", "model-2", spec=edited)
    assert "TritonModel/model-2/status" in await one_pass()
    assert sorted(judged) == [f"model-{i}" for i in range(MODELS)]
