"""The CLI run in the test's own process, its output captured."""

from __future__ import annotations

import contextlib
import io

from triton_operator.cli import main


def run(*argv: str) -> tuple[int, str, str]:
    """The CLI in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()
