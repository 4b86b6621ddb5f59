"""What the student's code prints while a test runs it: shown on stdout, never on stderr.

nbgrader's Validate button fails a test cell that writes anything to stderr, while grading (the
course's `IgnorePattern` setting) drops stderr and fails a test only when it raises. A harmless
`UserWarning` from the student's code would then make Validate report a failure the grade never
counts. Every check that calls student code runs it inside `stderr_on_stdout()`, so both agree:
the student still reads the warning, and only a failed check fails the cell. `running` adds to
that what every lesson's checks need around a student's function: torch's errors from a realistic
mistake, said in the course's words.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator, Sequence


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


@contextlib.contextmanager
def running(function: str, known: Sequence[tuple[str, str]] = ()) -> Iterator[None]:
    """Run a student's function inside a test: what it writes to stderr, warnings
    included, goes to stdout (so Validate agrees with grading), NotImplementedError propagates,
    and an error whose message holds a pattern of `known` becomes an AssertionError that quotes
    it and adds the course's words. Any other error propagates unchanged."""
    with stderr_on_stdout():
        try:
            yield
        except NotImplementedError:
            raise
        except Exception as error:
            for pattern, advice in known:
                if pattern in str(error):
                    raise AssertionError(f"{function} stopped with {type(error).__name__}: {error} "
                                         f"{advice}") from None
            raise
