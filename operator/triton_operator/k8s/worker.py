"""One worker per TritonServer: the only place its pods are synced, so syncs of a server never overlap.

A worker wakes on changes to its server, its models, their ConfigMaps and its pods, and on the
resync timer. Each pass reads the indexes, runs the pure pass (parse, bind, validate, size,
render), applies the children, syncs every pod through the control API, sets each pod's
readinessGate condition, and writes the statuses. Two edits at once become one or two passes,
never two loads of one model racing on one pod.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
from collections.abc import Mapping
from typing import Any

import aiohttp
import kopf

from ..api.parse import DEFAULT_NAMESPACE, object_id, parse_resource
from ..api.resources import TritonModel, TritonServer
from ..api.validation import Finding
from ..protocol.desired import DesiredModel
from ..render.config import config_revision, desired_model
from ..render.fleet import RenderedServer, model_config_maps, plan_fleet
from ..render import manifests
from ..render.schema import check_manifests
from ..triton.batching import BatchingSummary, ModelStatistics, StatisticsTracker, Window, summarize
from ..triton.client import ControlClient, ControlError, Timeouts
from ..triton.sync import Action, Outcome, Progress, Replica, ReplicaReport
from . import conditions as c
from . import metrics
from .api import ApiError, KubernetesApi
from .settings import Settings
from .state import Indexes, Pod, ServerKey, digest
from .status import ModelOutcome, Pass, ServerOutcome, model_status, pod_condition, server_status

logger = logging.getLogger(__name__)


class ServerWorker:
    def __init__(self, key: ServerKey, indexes: Indexes, api: KubernetesApi, settings: Settings):
        self.key = key
        self.indexes = indexes
        self.api = api
        self.settings = settings
        self.wakeup = asyncio.Event()
        self.replicas: dict[str, Replica] = {}  # pod uid -> its sync memory and client
        self.last_good: dict[str, DesiredModel] = {}  # model uid -> last valid rendering
        self.warned: dict[str, str] = {}  # model uid -> findings last sent as an Event
        self.applied: dict[str, str] = {}  # object -> digest of what was last applied
        self.deployed: dict[str, Any] | None = None  # the Deployment as last applied (or read once): its /dev/shm size is kept
        self.control_key: str | None = None  # read once; again after a pass in which a pod did not answer
        self.statistics = StatisticsTracker()  # Triton's counters per (pod uid, model, revision) at the last read
        self.batching: dict[str, tuple[str, BatchingSummary]] = {}  # Triton model -> (revision, last judged summary)
        self.written: dict[str, dict[str, Any]] = {}  # uid -> the status this worker last wrote
        self.started = self.finished = 0  # passes begun and ended
        self.done = asyncio.Condition()
        self.last_pass = Pass()
        self.retry_seconds = settings.retry_seconds

    @property
    def label(self) -> str:
        return f"{self.key[0]}/{self.key[1]}"

    def wake(self) -> None:
        self.wakeup.set()

    async def run(self) -> None:
        """Reconcile until the server and every model naming it are gone."""
        try:
            while True:
                self.wakeup.clear()
                self.started += 1
                delay = await self._reconcile_once()
                async with self.done:
                    self.finished += 1
                    self.done.notify_all()
                if self.indexes.server(self.key) is None and not self.indexes.models_of(self.key):
                    return
                try:
                    await asyncio.wait_for(self.wakeup.wait(), delay)
                except asyncio.TimeoutError:
                    self._forget_written()  # a resync also restores children someone deleted
        finally:
            await self._close_clients(set(self.replicas))

    async def next_pass(self) -> Pass:
        """Wake the worker and wait for a pass that started after this call (so it saw what is now)."""
        target = self.started + 1
        self.wake()
        async with self.done:
            await self.done.wait_for(lambda: self.finished >= target)
        return self.last_pass

    async def _reconcile_once(self) -> float:
        """One pass; how long to wait: the resync once settled, else a backoff doubling up to it."""
        try:
            with metrics.RECONCILE_SECONDS.labels(*self.key).time():
                settled = await self.reconcile()
            metrics.RECONCILES.labels(*self.key, "ok").inc()
        except Exception:
            settled = False
            metrics.RECONCILES.labels(*self.key, "error").inc()
            logger.exception("reconciling TritonServer %s failed; retrying in %.1fs", self.label, self.retry_seconds)
        if settled:
            self.retry_seconds = self.settings.retry_seconds
            return self.settings.resync_seconds
        delay, self.retry_seconds = self.retry_seconds, min(self.retry_seconds * 2, self.settings.resync_seconds)
        return delay

    async def reconcile(self) -> bool:
        """One pass; False when something is not there yet (a pod without an address, one that did not
        answer, an object the API server did not take): the worker then tries again sooner."""
        namespace, _ = self.key
        model_bodies = self.indexes.models_of(self.key)
        server_body = self.indexes.server(self.key)
        parsed_models: list[tuple[dict[str, Any], TritonModel | None, list[Finding]]] = []
        for body in model_bodies:
            model, found = parse_resource(body_without_status(body))
            parsed_models.append((body, model, found))  # type: ignore[arg-type]
        inline_owner = next((m for _, m, _ in parsed_models if m is not None and m.spec.server is not None and m.name == self.key[1]), None)
        if server_body is None and inline_owner is None:
            await self._write_statuses(parsed_models, None, None, Pass(), ServerOutcome(missing=True))
            return True
        server: TritonServer | None = None
        server_findings: list[Finding] = []
        if server_body is not None:
            parsed, server_findings = parse_resource(body_without_status(server_body))
            server = parsed if isinstance(parsed, TritonServer) else None
        if server is None and inline_owner is None:
            await self._write_statuses(parsed_models, server_body, None, Pass(), ServerOutcome(findings=server_findings))
            return True
        active = [m for body, m, _ in parsed_models if m is not None and not body["metadata"].get("deletionTimestamp")]
        files_from = {m.spec.files.config_map_ref.name for m in active if m.spec.files}
        fleet = plan_fleet([server] if server else [], active, self.indexes.config_maps_in(namespace, files_from))
        rendered = next(s for s in fleet.servers if (s.server.metadata.namespace or DEFAULT_NAMESPACE, s.server.name) == self.key)
        if self.control_key is None or any(report.error for report in self.last_pass.reports.values()):
            self.control_key = await self._read_control_key(rendered.server)
        writes, manifest_findings = await self._children(rendered)
        outcome = ServerOutcome(findings=[*server_findings, *fleet.findings, *manifest_findings])
        if outcome.server_errors:
            written = await self._apply(writes)
            await self._write_statuses(parsed_models, server_body, rendered, Pass(), outcome)
            return written
        desired, keep = self._desired(rendered, parsed_models, fleet.refused)
        async with asyncio.TaskGroup() as group:  # pods get models over the control API, not from these objects
            syncing = group.create_task(self._sync_pods(desired, keep, self.control_key))
            writing = group.create_task(self._apply(writes))
        this_pass = self.last_pass = syncing.result()
        self._judge_batching(rendered, this_pass)
        await self._write_statuses(parsed_models, server_body, rendered, this_pass, outcome)
        self._post_warnings(parsed_models, outcome)
        pods_settled = not any(p.address is None and not p.deleting for p in this_pass.pods) and not any(r.error for r in this_pass.reports.values())
        return pods_settled and writing.result()

    def _desired(
        self, rendered: RenderedServer, parsed_models: list[tuple[dict[str, Any], TritonModel | None, list[Finding]]], refused: set[str]
    ) -> tuple[dict[str, DesiredModel], set[str]]:
        """Valid models as rendered; a refused one keeps its last good version, or is left as it runs."""
        desired: dict[str, DesiredModel] = {}
        for model in rendered.models:
            desired[model.config.name] = self.last_good[model.model.metadata.uid or ""] = desired_model(model.config, model.files)
        keep: set[str] = set()
        for body, model, _ in parsed_models:
            uid = body["metadata"].get("uid", "")
            if body["metadata"].get("deletionTimestamp") or (model is not None and object_id("TritonModel", body["metadata"]) not in refused):
                continue
            if uid in self.last_good:
                desired.setdefault(self.last_good[uid].name, self.last_good[uid])
            elif model is not None:
                keep.add(model.model_name)
        return desired, keep

    async def _read_control_key(self, server: TritonServer) -> str:
        """The Secret's key: created once, reused ever after (never rotated by accident)."""
        namespace, _ = self.key
        name = manifests.control_secret_name(server)
        secret = await self.api.get("Secret", namespace, name)
        if secret is None:
            try:
                secret = await self.api.create(manifests.control_secret(server, secrets.token_urlsafe(32)))
            except ApiError as error:
                if error.status != 409:
                    raise
                secret = await self.api.get("Secret", namespace, name)  # made meanwhile: use that key
        assert secret is not None
        return base64.b64decode(secret["data"][manifests.CONTROL_SECRET_KEY]).decode()

    async def _children(self, rendered: RenderedServer) -> tuple[list[tuple[dict[str, Any], str]], list[Finding]]:
        """Deployment, Service and config ConfigMaps that changed since last written (with their digests),
        and the findings of those the Kubernetes schema refuses."""
        namespace, name = self.key
        if self.deployed is None:
            self.deployed = await self.api.get("Deployment", namespace, name)
        objects = [
            manifests.deployment_keeping_shm(rendered.server, rendered.shm, self.deployed),
            manifests.service(rendered.server),
            *model_config_maps(rendered.models),
        ]
        writes, findings = [], []
        for obj in objects:
            obj["metadata"]["namespace"] = namespace
            fingerprint = digest(obj)
            if self.applied.get(_where(obj)) == fingerprint:
                continue
            problems = check_manifests([obj])
            if problems:
                findings += problems
            elif obj["kind"] == "ConfigMap" and self._config_map_current(obj):
                self.applied[_where(obj)] = fingerprint
            else:
                writes.append((obj, fingerprint))
        return writes, findings

    def _forget_written(self) -> None:
        """The Deployment and Service are read and applied again (server-side apply of an unchanged
        object changes nothing); a config ConfigMap is remembered only while it still exists."""
        namespace, _ = self.key
        self.deployed = None
        self.applied = {
            where: fingerprint
            for where, fingerprint in self.applied.items()
            if where.startswith("ConfigMap/") and self.indexes.config_map(namespace, where.split("/", 1)[1]) is not None
        }

    async def _apply(self, writes: list[tuple[dict[str, Any], str]]) -> bool:
        """Write each object; one the API server refuses or does not answer is logged and written again
        next pass (False), and never stops the others or the pods' sync."""
        written = True
        for obj, fingerprint in writes:
            try:
                await self.api.apply(obj)
            except (ApiError, aiohttp.ClientError, asyncio.TimeoutError) as error:
                logger.warning("writing %s of TritonServer %s failed: %s", _where(obj), self.label, error)
                written = False
                continue
            self.applied[_where(obj)] = fingerprint
            if obj["kind"] == "Deployment":
                self.deployed = obj
        return written

    def _config_map_current(self, obj: Mapping[str, Any]) -> bool:
        existing = self.indexes.config_map(self.key[0], obj["metadata"]["name"])
        return existing is not None and existing.get("data") == obj.get("data")

    async def _sync_pods(self, desired: dict[str, DesiredModel], keep: set[str], control_key: str) -> Pass:
        namespace, _ = self.key
        server_body = self._as_written(self.indexes.server(self.key) or {})
        managed = set((server_body.get("status") or {}).get("managedModels") or [])
        pods = self.indexes.pods_of(self.key)
        live = [pod for pod in pods if pod.address and not pod.deleting]
        await self._close_clients(set(self.replicas) - {pod.uid for pod in live})
        limit = asyncio.Semaphore(self.settings.parallel_pods)

        async def one(pod: Pod) -> tuple[str, ReplicaReport, dict[str, ModelStatistics]]:
            replica = self._replica(pod, control_key)
            counters: dict[str, ModelStatistics] = {}
            async with limit:
                report = await replica.sync(desired, managed, progress=self._progress(pod), keep=keep)
                if not report.error:
                    with contextlib.suppress(ControlError):  # batching figures wait for the next pass
                        counters = await replica.client.statistics()
            return pod.name, report, counters

        results = await asyncio.gather(*(one(pod) for pod in live))
        reports = {name: report for name, report, _ in results}
        ready_pods = []
        for pod in live:
            wanted = pod_condition(desired, reports[pod.name])
            if wanted["status"] == "True":
                ready_pods.append(pod.name)
            if wanted["status"] != pod.models_ready or wanted["status"] == "False":
                with contextlib.suppress(ApiError):
                    await self.api.set_pod_condition(namespace, pod.name, wanted)
        statistics = {name: counters for name, _, counters in results}
        return Pass(reports=reports, pods=pods, desired=desired, ready_pods=ready_pods, synced=True, statistics=statistics)

    def _judge_batching(self, rendered: RenderedServer, this_pass: Pass) -> None:
        """Each model's batching since the last pass, summed over its pods. A window with too little
        traffic keeps the last verdict of the same revision, so a quiet minute does not erase it.
        The metrics follow the verdicts: those of models no longer judged are dropped."""
        windows: dict[str, list[Window]] = {}
        read = []
        for pod in this_pass.pods:
            report = this_pass.reports.get(pod.name)
            for name, counters in this_pass.statistics.get(pod.name, {}).items():
                state = report.states.get(name) if report else None
                key = (pod.uid, name, state.revision if state else "")  # a reload starts a new window
                windows.setdefault(name, []).append(self.statistics.read(key, counters))
                read.append(key)
        self.statistics.retain(read)
        judged: dict[str, tuple[str, BatchingSummary]] = {}
        for model in rendered.models:
            name, revision = model.config.name, config_revision(model.config)
            last = self.batching.get(name)
            current = last if last is not None and last[0] == revision else None  # this revision's last verdict
            if name in windows:
                first, *others = windows[name]
                summary = summarize(name, model.config, sum(others, first))
                if current is None or summary.reason != c.NOT_ENOUGH_TRAFFIC:
                    current = (revision, summary)
            if current is not None:
                judged[name] = current
        metrics.export_batching(*self.key, {name: summary for name, (_, summary) in judged.items()}, gone=self.batching.keys() - judged.keys())
        self.batching = judged

    def _replica(self, pod: Pod, control_key: str) -> Replica:
        replica = self.replicas.get(pod.uid)
        if replica is None or replica.client.url != pod.address:
            timeouts = Timeouts(self.settings.read_timeout_seconds, self.settings.load_timeout_seconds)
            assert pod.address is not None
            replica = Replica(ControlClient(pod.address, control_key, timeouts), self.settings.parallel_loads)
            self.replicas[pod.uid] = replica
        return replica

    def _progress(self, pod: Pod) -> Progress:
        namespace, server = self.key

        def record(_endpoint: str, action: Action, outcome: Outcome | None) -> None:
            if outcome is None:
                return
            labels = (namespace, server, action.model, pod.name, action.kind)
            metrics.CONTROL_CALLS.labels(*labels, "ok" if outcome.ok else "error").inc()
            metrics.CONTROL_CALL_SECONDS.labels(*labels).observe(outcome.seconds)
            if not outcome.ok:
                logger.warning("%s %s on pod %s failed: %s", action.kind, action.model, pod.name, outcome.error)

        return record

    async def _close_clients(self, uids: set[str]) -> None:
        for uid in uids:
            replica = self.replicas.pop(uid, None)
            if replica is not None:
                await replica.client.close()

    async def _write_statuses(
        self,
        parsed_models: list[tuple[dict[str, Any], TritonModel | None, list[Finding]]],
        server_body: dict[str, Any] | None,
        rendered: RenderedServer | None,
        this_pass: Pass,
        outcome: ServerOutcome,
    ) -> None:
        """Every model's status, then the server's (when it exists); each written only when it changed."""
        await self._write_model_statuses(parsed_models, rendered, this_pass, outcome)
        await self._write_server_status(server_body, rendered, this_pass, outcome)
        present = {body["metadata"].get("uid") for body, _, _ in parsed_models}
        if server_body is not None:
            present.add(server_body["metadata"].get("uid"))
        self.written = {uid: status for uid, status in self.written.items() if uid in present}

    async def _write_model_statuses(
        self,
        parsed_models: list[tuple[dict[str, Any], TritonModel | None, list[Finding]]],
        rendered: RenderedServer | None,
        this_pass: Pass,
        outcome: ServerOutcome,
    ) -> None:
        namespace, server = self.key
        states: dict[str, int] = {}
        for body, model, parse_findings in parsed_models:
            if body["metadata"].get("deletionTimestamp"):
                continue
            body = self._as_written(body)
            result = ModelOutcome.of(body, model, parse_findings, rendered, this_pass.reports, this_pass.pods, outcome)
            states[result.state] = states.get(result.state, 0) + 1
            share = next((s for s in rendered.shm.models if result.rendered and s.model == result.rendered.config.name), None) if rendered else None
            judged = self.batching.get(result.rendered.config.name) if result.rendered else None
            await self._patch_status(body, model_status(body, result, server, share.total_bytes if share else None, judged[1] if judged else None))
        for state in ("Ready", "Loading", "Failed", "Invalid"):
            metrics.MODELS.labels(namespace, server, state).set(states.get(state, 0))

    async def _write_server_status(self, server_body: dict[str, Any] | None, rendered: RenderedServer | None, this_pass: Pass, outcome: ServerOutcome) -> None:
        if server_body is None:
            return
        namespace, name = self.key
        server_body = self._as_written(server_body)
        status = server_status(server_body, rendered, this_pass, outcome)
        metrics.SERVER_REPLICAS.labels(namespace, name).set((server_body.get("spec") or {}).get("replicas", 1))
        metrics.SERVER_READY_REPLICAS.labels(namespace, name).set(status.get("readyReplicas") or 0)
        await self._patch_status(server_body, status)

    def _as_written(self, body: dict[str, Any]) -> dict[str, Any]:
        """The object with the status this worker last wrote. Status is the operator's alone, and the
        index may not have seen that write yet: reading it older would restart conditions'
        transition times and write the same status twice."""
        written = self.written.get(body.get("metadata", {}).get("uid", ""))
        return body if written is None else {**body, "status": written}

    async def _patch_status(self, body: dict[str, Any], status: dict[str, Any]) -> None:
        """Write the status when it changed; a failed write is tried again next pass."""
        if status == body.get("status"):
            return
        with contextlib.suppress(ApiError):
            await self.api.patch_status(body["kind"], self.key[0], body["metadata"]["name"], status)
            self.written[body["metadata"]["uid"]] = status

    def _post_warnings(self, parsed_models: list[tuple[dict[str, Any], TritonModel | None, list[Finding]]], outcome: ServerOutcome) -> None:
        """A Warning Event when a model's errors change (not on every pass)."""
        for body, _, parse_findings in parsed_models:
            errors = [f for f in [*parse_findings, *outcome.for_model(body)] if f.severity == "error"]
            uid = body["metadata"].get("uid", "")
            message = "; ".join(f"{f.path}: {f.message}" for f in errors)
            if message and self.warned.get(uid) != message:
                kopf.warn(body, reason="InvalidSpec", message=message[:1024])
            self.warned[uid] = message


def _where(obj: Mapping[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def body_without_status(body: Mapping[str, Any]) -> dict[str, Any]:
    """The object as input: status is the operator's output, not part of what is parsed."""
    return {key: value for key, value in body.items() if key != "status"}


class Workers:
    """The running workers, one per server key; started on first wake, gone when their server is."""

    def __init__(self, api: KubernetesApi, settings: Settings):
        self.api = api
        self.settings = settings
        self.indexes: Indexes | None = None
        self.running: dict[ServerKey, tuple[ServerWorker, asyncio.Task[None]]] = {}

    def get(self, key: ServerKey) -> ServerWorker:
        entry = self.running.get(key)
        if entry is None or entry[1].done():
            assert self.indexes is not None
            worker = ServerWorker(key, self.indexes, self.api, self.settings)
            task = asyncio.get_running_loop().create_task(worker.run(), name=f"triton-operator worker {key[0]}/{key[1]}")
            entry = self.running[key] = (worker, task)
        return entry[0]

    def wake(self, key: ServerKey) -> None:
        self.get(key).wake()

    async def stop(self) -> None:
        tasks = [task for _, task in self.running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.running.clear()
