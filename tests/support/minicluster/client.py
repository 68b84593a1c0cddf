"""The emulated API server as a cluster component reaches it: over HTTP, as one identity, reading
collections through list-then-watch."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
NAMESPACE_PATH = "/namespaces/default"  # the mini cluster's components serve the namespace the tests use
PODS = f"/api/v1{NAMESPACE_PATH}/pods"
SERVICES = f"/api/v1{NAMESPACE_PATH}/services"
SECRETS = f"/api/v1{NAMESPACE_PATH}/secrets"
DEPLOYMENTS = f"/apis/apps/v1{NAMESPACE_PATH}/deployments"
REPLICA_SETS = f"/apis/apps/v1{NAMESPACE_PATH}/replicasets"

Handler = Callable[[str, dict[str, Any]], None]  # a watch event's type (ADDED, MODIFIED, DELETED) and object


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status


class ApiClient:
    """Requests as one identity (its bearer token): the RBAC record (`ApiServer.calls`) tells the
    operator's requests from the cluster's own. A connection per request (no keep-alive): the API
    server's task serving a request ends with it (see tests/support/minicluster/__init__.py)."""

    def __init__(self, url: str, token: str, opened: asyncio.Event):
        connector = aiohttp.TCPConnector(force_close=True)
        self.session = aiohttp.ClientSession(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, connector=connector
        )
        self.watching: set[str] = set()  # the paths whose watch stream is open
        self.opened = opened  # set whenever a watch stream opens

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body)
        async with self.session.request(method, path, data=data, headers={"Content-Type": content_type}) as response:
            payload = await response.json(content_type=None)
            if response.status >= 400:
                raise ApiError(
                    response.status, payload.get("message", "") if isinstance(payload, dict) else str(payload)
                )
            return payload

    async def list(self, path: str) -> list[dict[str, Any]]:
        return (await self.request("GET", path))["items"]

    async def patch_status(self, path: str, status: Mapping[str, Any], content_type: str = MERGE_PATCH) -> None:
        await self.request("PATCH", f"{path}/status", {"status": status}, content_type)

    async def follow(self, path: str, handle: Handler) -> None:
        """Hand every object of the collection to `handle`, then every change, for ever: listed first,
        and listed again whenever the watch stream ends or breaks (what was deleted meanwhile is handed
        over as DELETED), as an informer does."""
        known: dict[str, dict[str, Any]] = {}
        while True:
            listed = {obj["metadata"]["uid"]: obj for obj in await self.list(path)}
            for uid in known.keys() - listed.keys():
                handle("DELETED", known.pop(uid))
            for uid, obj in listed.items():
                handle("MODIFIED" if uid in known else "ADDED", obj)
            known = listed
            no_timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
            try:
                async with self.session.get(path, params={"watch": "true"}, timeout=no_timeout) as response:
                    self.watching.add(path)
                    self.opened.set()
                    async for line in response.content:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        obj = event["object"]
                        if event["type"] == "DELETED":
                            known.pop(obj["metadata"]["uid"], None)
                        else:
                            known[obj["metadata"]["uid"]] = obj
                        handle(event["type"], obj)
            except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError):
                pass  # the API server cut the stream: listed and watched again
            finally:
                self.watching.discard(path)

    async def close(self) -> None:
        await self.session.close()
