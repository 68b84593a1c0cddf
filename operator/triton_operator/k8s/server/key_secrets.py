"""A server's key Secrets, read and kept by its worker: the operator's control key and the sidecars'
shared-memory key, one Secret each, made by the operator and read back (on each resync too).

Each key is kept, never silently replaced: a deleted Secret is made again with the key the operator
holds (Event ControlKeyRecreated), and a key other than the running pods' rolls them, as its digest is
in the pod template (Event ControlKeyRotated). Both keys are replaced on request (a new value of the
TritonServer's rotate annotation) and, when the operator is set to, once older than
control_key_max_age_seconds; each Secret records when and for which request.

A Secret another object holds the name of is taken (the pods are then neither written nor synced). A
Secret of the operator's whose content does not make a key the pods can run with (no data, no key, not
UTF-8, empty, other than visible ASCII) or whose made-at annotation is not a time is fixed by a person:
it is a condition on the TritonServer naming the Secret and the fix (key_problem), and fails static.
The pods keep the key the operator holds, which they were started with: the pod template does not
change and they are synced with it; an operator that holds none (it restarted) syncs no pod until the
Secret is fixed. A key read whole is never taken from it meanwhile, so nothing rolls to a bad key
(Triton refuses to start with an empty one).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ...decide.seen import ServerKey
from ...render import manifests
from ...render.fleet import RenderedServer
from ..api import CONFLICT, ApiError, KubernetesApi
from ..watch.indexes import ROTATE_ANNOTATION, Indexes, section
from . import ownership

# On a key Secret: when its key was made, and the rotate annotation's value it was made for.
KEY_MADE_ANNOTATION = "triton-operator.io/control-key-made-at"
KEY_REQUEST_ANNOTATION = "triton-operator.io/control-key-rotation"

Tell = Callable[[str, str, str], None]  # an Event on the server (type, reason, message), logged too


def made_at(secret: Mapping[str, Any]) -> datetime.datetime | None:
    """When the Secret's key was made: its made-at annotation, else its creation; None where that is not
    a time."""
    meta = section(secret, "metadata")
    made = section(meta, "annotations").get(KEY_MADE_ANNOTATION) or meta.get("creationTimestamp")
    try:
        return datetime.datetime.fromisoformat(str(made).replace("Z", "+00:00")) if made else None
    except ValueError:
        return None


def rotation_due(
    requested: str | None, secret: Mapping[str, Any], now: datetime.datetime, max_age_seconds: float
) -> str | None:
    """Why the Secret's key is to be replaced now, or None: a rotate annotation whose value the key was
    not made for, or (max_age_seconds above 0) a key older than that, by its made-at annotation or,
    on a Secret without one, its creation (a made-at that is not a time is key_problem's to report)."""
    annotations = section(section(secret, "metadata"), "annotations")
    if requested and requested != annotations.get(KEY_REQUEST_ANNOTATION):
        return f"asked for by annotation {ROTATE_ANNOTATION}={requested}"
    made = made_at(secret)
    if max_age_seconds > 0 and made is not None:
        age = (now - made).total_seconds()
        if age >= max_age_seconds:
            return f"it is {age / 86400:.1f} days old, above control_key_max_age_seconds ({max_age_seconds:.0f}s)"
    return None


def key_problem(secret: Mapping[str, Any], which: manifests.KeySecret) -> str | None:
    """What keeps the Secret's key from the pods, and what to do, or None: a key must be visible ASCII
    (printable, no spaces) for the control calls' headers and Triton's flags, and not empty."""
    name = section(secret, "metadata").get("name")
    fix = (
        f"put the key (visible ASCII characters, no spaces) under data.{which.data_key}, or delete the Secret "
        "for the operator to make it again (with the key it holds, else a new one the pods roll to); the pods "
        "keep the key they run with meanwhile"
    )
    encoded = section(secret, "data").get(which.data_key)
    if not section(secret, "data"):
        return f"Secret {name} has no data: {fix}"
    if not isinstance(encoded, str):
        return f"Secret {name} has no {which.data_key} in its data: {fix}"
    try:
        key = base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return f"Secret {name}: data.{which.data_key} is not UTF-8 text: {fix}"
    if not key:
        return f"Secret {name}: data.{which.data_key} is empty (Triton refuses to start with an empty key): {fix}"
    if not all("!" <= character <= "~" for character in key):
        return f"Secret {name}: data.{which.data_key} holds spaces or characters other than visible ASCII: {fix}"
    return None


def made_at_problem(secret: Mapping[str, Any]) -> str | None:
    """A made-at annotation that is not a time, and what to do: the key's age is unknown meanwhile, so it
    is not replaced for its age."""
    meta = section(secret, "metadata")
    made = section(meta, "annotations").get(KEY_MADE_ANNOTATION)
    if made is None or made_at(secret) is not None:
        return None
    return (
        f"Secret {meta.get('name')}: annotation {KEY_MADE_ANNOTATION} is not a time ({str(made)[:40]!r}): set it to "
        "one such as 2025-06-01T00:00:00Z, or remove it for the Secret's creation to count"
    )


def _timestamp(now: datetime.datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


class KeySecrets:
    """Reads a server's key Secrets, makes them, rotates their keys, and holds the keys last read."""

    def __init__(
        self,
        key: ServerKey,
        indexes: Indexes,
        api: KubernetesApi,
        deployment: Callable[[], Awaitable[dict[str, Any] | None]],
        tell: Tell,
        key_max_age_seconds: float = 0,
    ):
        """`deployment`: the server's Deployment as last applied or read (its pods' key digests)."""
        self.key = key
        self.indexes = indexes
        self.api = api
        self.deployment = deployment
        self.tell = tell
        self.key_max_age_seconds = key_max_age_seconds  # 0: the keys are replaced on request only
        self.taken: dict[str, str] = {}  # Secret/name -> why the operator does not use it (another object holds it)
        self.problems: dict[str, str] = {}  # Secret/name -> what is wrong with its content, and the fix
        self.key_made: dict[
            manifests.KeySecret, dict[str, Any]
        ] = {}  # each key Secret as last read or written, without its data: when to rotate
        self.known_keys: dict[manifests.KeySecret, str] = {}  # each key, as read from its Secret (or written to it)
        self.checked = False  # the Secrets were read since the last resync

    async def keys(
        self, rendered: RenderedServer, read_again: bool, now: datetime.datetime | None = None
    ) -> dict[manifests.KeySecret, str] | None:
        """The keys the pods get, from their Secrets: read once, then again after each resync, when asked
        (after a pass in which a pod refused the control key) and when one is to be rotated. None when
        a key is not known: another object holds a key Secret's name (self.taken says so), or its
        Secret does not hold a usable one and the operator holds none (self.problems): the pods are
        neither written nor synced."""
        now = now or datetime.datetime.now(tz=datetime.UTC)
        if len(self.known_keys) < len(manifests.KEY_SECRETS) or not self.checked or read_again or self._due(now):
            read = {which: await self._key_from_secret(rendered, which, now) for which in manifests.KEY_SECRETS}
            self.known_keys = {which: key for which, key in read.items() if key is not None}
            self.checked = True
        return self.known_keys if len(self.known_keys) == len(manifests.KEY_SECRETS) else None

    def forget(self) -> None:
        """Before a resync: the Secrets are read again (a deleted one is made again with the key held)."""
        self.checked = False

    def _due(self, now: datetime.datetime) -> bool:
        requested = self._requested_rotation()
        return any(
            rotation_due(requested, made, now, self.key_max_age_seconds) is not None for made in self.key_made.values()
        )

    def _requested_rotation(self) -> str | None:
        server = self.indexes.server(self.key) or {}
        requested = section(section(server, "metadata"), "annotations").get(ROTATE_ANNOTATION)
        return requested if isinstance(requested, str) else None

    async def _key_from_secret(
        self, rendered: RenderedServer, which: manifests.KeySecret, now: datetime.datetime
    ) -> str | None:
        """The Secret's key. A Secret someone deleted is made again with the key the operator holds;
        holding none (it restarted meanwhile), with a new key. The key is never replaced silently under
        running pods: its digest is in the pod template, so a key other than theirs rolls them. A
        Secret whose key is not usable leaves the key held, if any (key_problem)."""
        name = which.secret_name(rendered.server)
        where = f"Secret/{name}"
        secret = await self.api.get("Secret", self.key[0], name)
        if secret is None:
            secret = await self._create(rendered, which, self.known_keys.get(which) or secrets.token_urlsafe(32), now)
        if secret is None or ownership.taken(
            manifests.key_secret(rendered.server, which, None), True, ownership.controller_uid(secret)
        ):
            self.taken[where] = ownership.taken_message("Secret", name)
            self.key_made.pop(which, None)
            self.problems.pop(where, None)  # not ours to read: taken says so
            return None
        self.taken.pop(where, None)
        why = rotation_due(self._requested_rotation(), secret, now, self.key_max_age_seconds)
        if why is not None:
            secret = await self._rotate(secret, which, now)
        unusable = key_problem(secret, which)
        self._note(where, unusable or made_at_problem(secret))
        self.key_made[which] = {
            "metadata": {key: section(secret, "metadata").get(key) for key in ("annotations", "creationTimestamp")}
        }
        if unusable is not None:
            return self.known_keys.get(which)
        key = base64.b64decode(secret["data"][which.data_key]).decode()
        deployed = await self.deployment()
        template = section(section(deployed or {}, "spec"), "template")
        started_with = section(section(template, "metadata"), "annotations").get(which.digest_annotation)
        if why is not None:
            replaced = f"the key in Secret {name} was replaced ({why}): the pods roll to it"
            self.tell("Normal", "ControlKeyRotated", replaced)
        elif started_with not in (None, manifests.key_digest(key)):
            why = "it was changed, or made anew while the operator did not hold the key"
            self.tell(
                "Warning",
                "ControlKeyRotated",
                f"the pods run with another key than Secret {name} holds ({why}): they roll to it",
            )
        return key

    def _note(self, where: str, problem: str | None) -> None:
        """Keep the Secret's problem for the server's condition; a new one is also an Event."""
        if problem is None:
            self.problems.pop(where, None)
        elif self.problems.get(where) != problem:
            self.problems[where] = problem
            self.tell("Warning", "KeySecretInvalid", problem)

    def _made_annotations(self, now: datetime.datetime) -> dict[str, str]:
        """What the Secret records of the key it holds: when it was made, and for which rotate request."""
        return {KEY_MADE_ANNOTATION: _timestamp(now), KEY_REQUEST_ANNOTATION: self._requested_rotation() or ""}

    async def _rotate(
        self, secret: Mapping[str, Any], which: manifests.KeySecret, now: datetime.datetime
    ) -> dict[str, Any]:
        """A new key in the Secret, written only over the version read (a 409 fails the pass, which reads it again)."""
        meta = secret["metadata"]
        data = {which.data_key: base64.b64encode(secrets.token_urlsafe(32).encode()).decode()}
        patch = {
            "metadata": {"resourceVersion": meta.get("resourceVersion"), "annotations": self._made_annotations(now)},
            "data": data,
        }
        rotated = await self.api.patch("Secret", self.key[0], meta["name"], patch)
        if rotated is None:
            raise ApiError(404, f"Secret {meta['name']} was deleted while its key was rotated")
        return rotated

    async def _create(
        self, rendered: RenderedServer, which: manifests.KeySecret, key: str, now: datetime.datetime
    ) -> dict[str, Any] | None:
        """The Secret made with `key`; one made meanwhile is read back instead (None if it is gone again)."""
        secret = manifests.key_secret(rendered.server, which, key)
        secret["metadata"]["annotations"] = {
            **(secret["metadata"].get("annotations") or {}),
            **self._made_annotations(now),
        }
        try:
            created = await self.api.create(secret)
        except ApiError as error:
            if error.status != CONFLICT:
                raise
            return await self.api.get(
                "Secret", self.key[0], which.secret_name(rendered.server)
            )  # made meanwhile: judged as found
        if key == self.known_keys.get(which):
            self.tell(
                "Normal",
                "ControlKeyRecreated",
                f"Secret {created['metadata']['name']} was deleted; made again with the key the pods run with",
            )
        return created
