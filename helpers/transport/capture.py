"""What the student's code prints while a test runs it: shown on stdout, never on stderr.

nbgrader's Validate button fails a test cell that writes anything to stderr, while grading (the
course's `IgnorePattern` setting) drops stderr and fails a test only when it raises. A harmless
`UserWarning` from the student's code would then make Validate report a failure the grade never
counts. Every check that calls student code runs it inside `stderr_on_stdout()`, so both agree:
the student still reads the warning, and only a failed check fails the cell. What the student's
code raised is worded by one function, `helpers.transport.errors.failure`.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator


def _show_on_stdout(message, category, filename, lineno, file=None, line=None) -> None:
    text = warnings.formatwarning(message, category, filename, lineno, line)
    sys.stdout.write(text)


@contextlib.contextmanager
def stderr_on_stdout() -> Iterator[None]:
    """Send Python-level stderr writes and warnings raised inside the block to stdout.

    Usable as `with stderr_on_stdout():` or as a decorator on a check function. Output written
    straight to file descriptor 2 by C code is not covered (torch's own warnings go through
    Python's `warnings` module and are)."""
    with warnings.catch_warnings(), contextlib.redirect_stderr(sys.stdout):
        warnings.showwarning = _show_on_stdout
        yield
