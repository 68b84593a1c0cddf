"""Which objects the operator may write: the ones it controls, and names nothing holds.

A child is written only where its name is free, or where the object there carries, as its
controller ownerReference, the uid of the child's owner (the TritonServer; the TritonModel for its
config ConfigMap and for the TritonServer of its inline `server:`). Any other object under that name
(a user's Service, another tool's Deployment or autoscaler) is left exactly as it is: writing it would
take it over, and the owner reference that write adds would have the garbage collector delete it with
the TritonServer. The server reports the name as taken instead (condition reason NameTaken).

An object the operator made whose ownerReference was removed since (`kubectl delete --cascade=orphan`
of its TritonServer does that, as does an edit) counts as taken too: nothing left on it tells it from a
look-alike, since labels and managedFields are whatever its creator wrote. Deleting it lets the operator
make it anew.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def controller_uid(obj: Mapping[str, Any] | None) -> str | None:
    """The uid of the object's controller (its ownerReference marked controller), if it has one."""
    references = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return next((ref.get("uid") for ref in references if ref.get("controller")), None)


def taken(desired: Mapping[str, Any], exists: bool, holder: str | None) -> bool:
    """Whether writing `desired` would take over the object now under its name, if one `exists`, whose
    controller's uid is `holder`. `desired` names its owner in its controller ownerReference; one
    without (its owner is not made yet) can only be written where nothing is."""
    if not exists:
        return False
    wanted = controller_uid(desired)
    return wanted is None or holder != wanted


def taken_message(kind: str, name: str) -> str:
    """What the server's condition says of a taken name: which object, and the two ways out."""
    return (
        f"{kind} {name} exists and is not one the operator made for this TritonServer (it has no controller "
        "ownerReference to its owner), so the operator leaves it as it is: "
        f"rename the TritonServer, or delete the {kind} to let the operator make its own"
    )
