"""Which Triton release local mode runs, next to the one the server's image names: the wheel's tritonserver
can be older than the image a cluster runs, and a model that uses a python-backend API added since then
(`InferenceResponse(parameters=...)`) fails only locally, with an error about an argument it does not know.

Triton's server says its version (2.N.P, in its metadata); NVIDIA's images name their release (YY.MM). From
build.py's version map at each tag of Triton's server: 2.10.0 is 21.05, and each minor version one month
later, up to 2.59.0 (25.06); 2.59.1 is 25.07, and from 2.60.0 (25.08) each minor version one month later
again (2.71.0: 26.07).
"""

from __future__ import annotations

import re

from ..api.security import triton_release

_SERVER_VERSION = re.compile(r"2\.(?P<minor>\d+)\.(?P<patch>\d+)")
FIRST_MAPPED_MINOR = 10  # 2.10.0, release 21.05: the first the rule holds for
# Months since year 0 (YY * 12 + MM - 1) of release 2.N.0 are N + this, up to 2.59.0.
MONTHS_OVER_MINOR = 21 * 12 + 5 - 1 - FIRST_MAPPED_MINOR
# The patch release that took a month of its own (25.07): every release from it on is one month later.
MONTH_OF_ITS_OWN = (59, 1)
# What Python (`unexpected keyword argument 'parameters'`) and pybind11, which builds the python backend's
# classes (`incompatible constructor arguments`), say of an argument the called code does not take.
UNKNOWN_ARGUMENT = re.compile(
    r"unexpected keyword argument|incompatible (?:constructor|function) arguments|takes \d+ positional argument"
)


def server_release(version: str) -> tuple[int, int] | None:
    """The release (YY, MM) of Triton server `version` ("2.51.0": (24, 10)); None for a version the rule
    does not cover."""
    match = _SERVER_VERSION.match(version)
    if match is None or int(match["minor"]) < FIRST_MAPPED_MINOR:
        return None
    minor, patch = int(match["minor"]), int(match["patch"])
    year, month = divmod(minor + MONTHS_OVER_MINOR + ((minor, patch) >= MONTH_OF_ITS_OWN), 12)
    return year, month + 1


def _named(release: tuple[int, int]) -> str:
    return f"{release[0]:02d}.{release[1]:02d}"


def _releases(version: str, image: str) -> tuple[str, str] | None:
    """The releases of this tritonserver and of the server's image, named, where the image's is newer."""
    running, imaged = server_release(version), triton_release(image)
    if running is None or imaged is None or imaged <= running:
        return None
    return _named(running), _named(imaged)


def running_line(version: str, image: str) -> str:
    """The line local mode prints once its tritonserver is up: which Triton runs, and whether the server's
    image (spec.image, or the operator's default) is a newer release."""
    release = server_release(version)
    line = f"tritonserver {version or '(version unread)'}" + (f" (release {_named(release)})" if release else "")
    if releases := _releases(version, image):
        running, imaged = releases
        return (
            f"{line} is up; the server's image {image} is release {imaged}, newer: what Triton's API gained "
            f"since {running} is unknown here, and a model using it fails here only"
        )
    return f"{line} is up"


def with_hint(error: str, version: str, image: str) -> str:
    """The error, with a hint where it names an argument the called code does not know and the server's image
    is a newer release than this tritonserver."""
    releases = _releases(version, image)
    if releases is None or not UNKNOWN_ARGUMENT.search(error):
        return error
    running, imaged = releases
    return (
        f"{error}\nhint: this tritonserver is {version} (release {running}), older than the server's image {image} "
        f"(release {imaged}): an argument added since {running} is unknown here, and known on that image"
    )
