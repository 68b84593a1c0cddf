"""The emulated API server as a cluster component reaches it: over HTTP, as one identity, reading
collections through list-then-watch."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
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

logger = logging.getLogger(__name__)
AWAY_RETRY_SECONDS = 1.0  # between tries to reach an API server that is away (restarting, say)
Handler = Callable[[str, dict[str, Any]], None]  # a watch event's type (ADDED, MODIFIED, DELETED) and object


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status


class ApiClient:
    """Requests as one identity (its bearer token): the RBAC record (`ApiServer.calls`) tells the
    operator's requests from the cluster's own. A connection per request (no keep-alive): the API
    server's task serving a request ends with it (see tests/support/minicluster/__init__.py)."""

    def __init__(self, url: str, token: str | None, opened: asyncio.Event, tls: ssl.SSLContext | None = None):
        """`token`: the identity's bearer token; None where `tls` holds a client certificate instead."""
        connector = aiohttp.TCPConnector(force_close=True, ssl=tls if tls is not None else True)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.session = aiohttp.ClientSession(base_url=url, headers=headers, connector=connector)
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

    async def list(self, path: str, query: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        return (await self._list(path, query or {}))["items"]  # type: ignore[no-any-return]

    async def _list(self, path: str, query: Mapping[str, str]) -> Any:
        async with self.session.get(path, params=query) as response:
            payload = await response.json(content_type=None)
            if response.status >= 400:
                raise ApiError(response.status, payload.get("message", "") if isinstance(payload, dict) else "")
            return payload

    async def patch_status(self, path: str, status: Mapping[str, Any], content_type: str = MERGE_PATCH) -> None:
        await self.request("PATCH", f"{path}/status", {"status": status}, content_type)

    async def follow(self, path: str, handle: Handler, query: Mapping[str, str] | None = None) -> None:
        """Hand every object of the collection to `handle`, then every change, for ever: listed first,
        and listed again whenever the watch stream ends or breaks (what was deleted meanwhile is handed
        over as DELETED), as an informer does. While the API server cannot be reached or refuses the list,
        what was last seen stands and the list is tried again every AWAY_RETRY_SECONDS, as client-go's
        reflector does."""
        known: dict[str, dict[str, Any]] = {}
        while True:
            try:
                listing = await self._list(path, query or {})
            except (aiohttp.ClientError, OSError, ValueError, ApiError) as error:
                # ValueError: a body that is not JSON. A restarting API server refuses lists (403) until its
                # RBAC caches are filled: every error is retried, said in the log.
                logger.warning("listing %s failed, tried again: %r", path, error)
                await asyncio.sleep(AWAY_RETRY_SECONDS)
                continue
            listed = {obj["metadata"]["uid"]: obj for obj in listing["items"]}
            for uid in known.keys() - listed.keys():
                handle("DELETED", known.pop(uid))
            for uid, obj in listed.items():
                handle("MODIFIED" if uid in known else "ADDED", obj)
            known = listed
            no_timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
            try:
                since = listing.get("metadata", {}).get("resourceVersion", "")
                watch = {**(query or {}), "watch": "true"}
                if since.isdigit():  # a real API server's: the watch starts where the list ended
                    watch["resourceVersion"] = since
                async with self.session.get(path, params=watch, timeout=no_timeout) as response:
                    self.watching.add(path)
                    self.opened.set()
                    async for line in response.content:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            break  # e.g. 410 Gone: listed again
                        obj = event["object"]
                        if event["type"] == "DELETED":
                            known.pop(obj["metadata"]["uid"], None)
                        else:
                            known[obj["metadata"]["uid"]] = obj
                        handle(event["type"], obj)
            except (aiohttp.ClientError, OSError):
                pass  # the API server cut the stream or is away: listed (and retried) again
            finally:
                self.watching.discard(path)

    async def close(self) -> None:
        await self.session.close()
