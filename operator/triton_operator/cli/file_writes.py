"""How the CLI writes the files it makes (`render`'s repository, `image`'s Dockerfiles, `import`'s CRs,
local's key): each file written beside its place and renamed there, `render`'s whole output written into a
folder of its own and then moved into place. Nothing is written through a link; a file holding a key is
its owner's alone.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

# A new file, never one that is there, nor one a link there points to.
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_file(path: Path, content: bytes, private: bool = False) -> None:
    """Create, write, close (pathlib's write_text makes four more system calls); folders are made only when
    the file cannot be opened without them. A `private` file (one holding a key) is its owner's alone."""
    mode = 0o600 if private else 0o666
    try:
        descriptor = os.open(path, _NEW_FILE, mode)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, _NEW_FILE, mode)
    try:
        unwritten = memoryview(content)
        while unwritten:
            unwritten = unwritten[os.write(descriptor, unwritten) :]
    finally:
        os.close(descriptor)


def replace_file(path: Path, content: bytes, private: bool = False) -> None:
    """Write the whole file beside it, then rename it over the old one: `local` watching the folder reads the
    old file or the new one, never one emptied for the write (read so, its model was unloaded). A link at
    `path` is replaced, never written through."""
    partial = path.with_name(f".{path.name}.partial")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(partial)  # left by a write that failed, or a link put there
    write_file(partial, content, private)
    os.replace(partial, path)


class OutputRefused(Exception):
    """The output folder cannot take what was written for it; nothing was moved there."""


_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _is_folder(path: Path) -> bool:
    """A folder, not a link to one."""
    return stat.S_ISDIR(path.lstat().st_mode)


def _check_takes(staging: Path, destination: Path) -> None:
    """Refuse, before anything moves, an output whose file is a folder of `destination` or the other way round."""
    for folder, folders, files in os.walk(staging):
        relative = Path(folder).relative_to(staging)
        for name in folders:
            target = destination / relative / name
            if os.path.lexists(target) and not target.is_symlink() and not _is_folder(target):
                raise OutputRefused(f"{target} is a file, where render writes a folder: move it away")
        for name in files:
            target = destination / relative / name
            if os.path.lexists(target) and _is_folder(target):
                raise OutputRefused(f"{target} is a folder, where render writes a file: move it away")


def _folder_in(parent: int, name: str) -> int:
    """The folder `name` in the folder `parent`, made where missing; a link there is replaced by a folder,
    never followed."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode):
            os.unlink(name, dir_fd=parent)
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, dir_fd=parent)
    return os.open(name, _FOLDER, dir_fd=parent)


def _move_into(source: int, target: int) -> None:
    """Every file under `source` renamed to its place under `target`: a file or link there is replaced, never
    written through."""
    for entry in os.scandir(source):
        if entry.is_dir(follow_symlinks=False):
            inner_source = os.open(entry.name, _FOLDER, dir_fd=source)
            try:
                inner_target = _folder_in(target, entry.name)
                try:
                    _move_into(inner_source, inner_target)
                finally:
                    os.close(inner_target)
            finally:
                os.close(inner_source)
        else:
            os.replace(entry.name, entry.name, src_dir_fd=source, dst_dir_fd=target)


def _holds(path: Path, content: bytes, private: bool) -> bool:
    """Whether `path` is a file (not a link) of these bytes, private where it is to be."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode) or status.st_size != len(content):
            return False
        return (not private or stat.S_IMODE(status.st_mode) == 0o600) and os.read(descriptor, len(content)) == content
    finally:
        os.close(descriptor)


class StagedFolder:
    """An output written into a folder of its own before it is moved into place. A file the destination holds
    already, byte for byte and by no link, is left there unwritten: a render over an earlier one renames
    nothing over its files (on ext4 a file renamed over another has its blocks allocated at once,
    auto_da_alloc, which costs the kernel far more than leaving it: bench/RESULTS.md, "Measurements behind
    the design")."""

    def __init__(self, destination: Path, staging: Path, fresh: bool):
        self.staging = staging
        self._destination = None if fresh else destination.resolve()
        self._linkless: dict[Path, bool] = {}  # folder of the destination -> no link on its way

    def _reached_by_no_link(self, folder: Path) -> bool:
        if folder == self._destination:
            return True
        if folder not in self._linkless:
            self._linkless[folder] = self._reached_by_no_link(folder.parent) and not folder.is_symlink()
        return self._linkless[folder]

    def write(self, relative: str, content: bytes, private: bool = False) -> None:
        earlier = self._destination / relative if self._destination else None
        if earlier is None or not self._reached_by_no_link(earlier.parent) or not _holds(earlier, content, private):
            write_file(self.staging / relative, content, private)


@contextlib.contextmanager
def staged_folder(destination: Path) -> Iterator[StagedFolder]:
    """A new folder to write the whole output into, moved into `destination` once the block ends without an
    error (renamed whole where `destination` is new; else file by file into it, its other files left as they
    are) and removed on any error, `destination` left as it was: an output is all there or not at all. It is
    made beside a new `destination`, or hidden inside an existing one (its parent may not be writable, as for
    --out .). Raises OutputRefused, before anything moves, where a file of the output is a folder there or the
    other way round."""
    if os.path.lexists(destination) and not destination.is_dir():
        raise OutputRefused(f"{destination} is not a folder: name a folder for the output")
    fresh = not destination.exists()
    token = secrets.token_hex(4)
    staging = destination.with_name(f".{destination.name}.{token}.partial") if fresh else destination / f".{token}"
    staging.parent.mkdir(parents=True, exist_ok=True)
    staging.mkdir()
    try:
        yield StagedFolder(destination, staging, fresh)
        if fresh:
            os.rename(staging, destination)
            return
        _check_takes(staging, destination)
        source, target = os.open(staging, _FOLDER), os.open(destination, _FOLDER & ~os.O_NOFOLLOW)
        try:
            _move_into(source, target)
        finally:
            os.close(source)
            os.close(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
