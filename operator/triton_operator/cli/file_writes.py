"""How the CLI writes the files it makes (`render`'s repository, `image`'s Dockerfiles, `import`'s CRs):
written over in place, or replaced whole where `local` may be watching.
"""

from __future__ import annotations

import os
from pathlib import Path

_FILE_TO_WRITE = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC


def write_file(path: Path, content: bytes, private: bool = False) -> None:
    """Open, write, cut to length, close (pathlib's write_text makes four more system calls). An earlier
    file is written over, not emptied first: on ext4 emptying frees its blocks and refilling allocates
    new ones at close (auto_da_alloc), most of the kernel's time of a render into the folder of an
    earlier one. Folders are made only when the file cannot be opened without them, so such a render
    makes none. A `private` file (a key) is its owner's alone, an earlier one too."""
    mode = 0o600 if private else 0o666
    try:
        descriptor = os.open(path, _FILE_TO_WRITE, mode)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, _FILE_TO_WRITE, mode)
    try:
        if private:
            os.fchmod(descriptor, mode)
        unwritten = memoryview(content)
        while unwritten:
            unwritten = unwritten[os.write(descriptor, unwritten) :]
        os.ftruncate(descriptor, len(content))
    finally:
        os.close(descriptor)


def replace_file(path: Path, content: bytes, private: bool = False) -> None:
    """Write the whole file beside it, then rename it over the old one: `local` watching the folder reads the
    old file or the new one, never one emptied for the write (read so, its model was unloaded)."""
    partial = path.with_name(f".{path.name}.partial")
    write_file(partial, content, private)
    os.replace(partial, path)
