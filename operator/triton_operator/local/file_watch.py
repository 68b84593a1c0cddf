"""Local mode's watch on its files: the CR files and folders it was given, and the model repository.

Its own module because what counts as a change is a decision of its own: YAML files and folders
under a named folder, a named file through its folder (editors save by replacing), every file of
the repository but Python's caches, and folders moved in or out as one event. inotify (watchfiles)
reports each save as it happens, so an edit is acted on as it is saved, not at the next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from watchfiles import Change, awatch

from ..repository import SKIPPED_FOLDERS
from ..sources import YAML_SUFFIXES

# Changes to the files are acted on once they have been quiet this long: a save (even one written
# in several steps) is one change, and is acted on 10 ms after it, not watchfiles' default 50 ms.
QUIET_MS = 10


async def watch_files(
    paths: Sequence[str],
    changed: asyncio.Event,
    stop: asyncio.Event,
    touched: set[Path] | None = None,
    repository: Path | None = None,
) -> None:
    """Set `changed` whenever a named file, or a YAML file or a folder under a named folder, or any file of the
    model `repository` (but Python's caches), is written, created, moved or removed, until `stop` is set; each
    such path is added to `touched`, a save that changes nothing too. Folders are watched with their
    subfolders; a named file through its folder alone, so an editor that saves by replacing the file is still
    seen. A folder moved in or out is one event for the folder (none for the files in it), so folders are known
    by name: a removed path is a folder if one was seen there."""
    repository = repository.resolve() if repository else None
    named: list[str | Path] = [*paths, *([repository] if repository else [])]
    folders = [Path(p).resolve() for p in named if Path(p).is_dir()]
    files = {Path(p).resolve() for p in paths if not Path(p).is_dir()}
    subfolders = {path for folder in folders for path in folder.rglob("*") if path.is_dir()}

    def ours(change: Change, name: str) -> bool:
        path = Path(name).resolve()
        if path in files:
            return True
        if not any(path.is_relative_to(folder) for folder in folders):
            return False
        if repository and path.is_relative_to(repository) and SKIPPED_FOLDERS & set(path.relative_to(repository).parts):
            return False  # Triton's python stub writes model.py's bytecode there as it loads it
        if change == Change.added and path.is_dir():
            subfolders.update({path, *(sub for sub in path.rglob("*") if sub.is_dir())})
            return True
        if change == Change.deleted and path in subfolders:
            subfolders.difference_update({sub for sub in subfolders if sub.is_relative_to(path)})
            return True
        if repository and path.is_relative_to(repository):
            return True
        return path.suffix in YAML_SUFFIXES and not path.is_dir()

    async def watch(roots: Sequence[Path], recursive: bool) -> None:
        async for batch in awatch(*roots, watch_filter=ours, recursive=recursive, step=QUIET_MS, stop_event=stop):
            if touched is not None:
                touched.update(Path(name).resolve() for _, name in batch)
            changed.set()

    parents = sorted({file.parent for file in files if file.parent.is_dir()})
    await asyncio.gather(
        *(watch(roots, recursive) for roots, recursive in ((folders, True), (parents, False)) if roots)
    )


@contextlib.asynccontextmanager
async def watching(
    paths: Sequence[str], once: bool, stop: asyncio.Event, touched: set[Path], repository: Path | None
) -> AsyncIterator[asyncio.Event]:
    """An event set on every change of the files while in the block (never with --once); the paths saved go
    into `touched`. Watching starts before Triton does: an edit saved while it starts is acted on once it runs."""
    changed, stop_watching = asyncio.Event(), asyncio.Event()
    if once:
        yield changed
        return
    watcher = asyncio.create_task(watch_files(paths, changed, stop_watching, touched, repository))
    watcher.add_done_callback(
        lambda _: stop.set()
    )  # a watch that ends by itself (say, the inotify limit) ends local mode; its error is raised below
    try:
        yield changed
    finally:
        stop_watching.set()
        await watcher
