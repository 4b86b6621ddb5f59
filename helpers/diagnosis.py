"""A failed check reads as its diagnosis, first, in the student's notebook.

A check that fails raises an AssertionError whose message says what is wrong and what to do.
IPython would print it last, under some twenty lines of traceback through helpers/checks/
that the student cannot act on, wrapped in Validate's dialog too. `show_diagnoses_first()`, called
by each lesson's setup cell, makes IPython show such a failure as its message alone. Errors raised
anywhere else, the student's own code included, keep their full traceback: there the frames are
the student's and point at the line to fix.

While nbgrader autogrades, test cells run in the grader's process and their failures are already
written as one line; the kernel is left as it is.
"""

from __future__ import annotations

import os
import textwrap

# Modules whose failed asserts are the course's diagnoses.
CHECK_MODULES = ("helpers.",)


# What a class report's group says after a mistake's name when the check recognised it only by the
# text (or type) of the error the student's code raised, which that code could have written itself.
BY_ERROR_TEXT = " (recognised by the raised error's text)"


def mistake(name: str, message: str, *, by_error_text: bool = False) -> AssertionError:
    """The failure of a check that recognised a mistake: an AssertionError saying `message` (the
    student's own numbers in it) that carries `name`, a short identifier of the mistake which stays
    the same for every student who makes it (the class report groups a class's failures by it).
    `by_error_text`: recognised only by what the student's code raised, never by the grader's own
    evidence; the class report keeps such failures in a group of their own (report_group)."""
    error = AssertionError(message)
    error.mistake = name
    error.by_error_text = by_error_text
    return error


def report_group(error: BaseException) -> str | None:
    """The group a class report files `error` under: its mistake's name, marked when only the
    student's own error text named it (BY_ERROR_TEXT); None for a failure no check named."""
    name = mistake_name(error)
    if name is None:
        return None
    return name + BY_ERROR_TEXT if getattr(error, "by_error_text", False) is True else name


def mistake_name(error: BaseException) -> str | None:
    """The identifier a check gave `error` with `mistake`, or None."""
    name = getattr(error, "mistake", None) if isinstance(error, AssertionError) else None
    return name if type(name) is str else None


def raised_by_a_check(tb) -> bool:
    """True when the innermost frame of traceback `tb` (where the error was raised) is a helper's."""
    innermost = None
    while tb is not None:
        innermost, tb = tb, tb.tb_next
    module = "" if innermost is None else innermost.tb_frame.f_globals.get("__name__", "")
    return module.startswith(CHECK_MODULES)


# Output areas break an overlong line anywhere, mid-word included; Validate's dialog does not break
# it at all. Lines of this width break between words and fit both.
WIDTH = 96


def diagnosis_lines(error: BaseException) -> list[str]:
    """What a failed check shows: its type and message, broken between words, and nothing else."""
    message = str(error).strip() or "the check failed without a message"
    lines = []
    for paragraph in f"{type(error).__name__}: {message}".splitlines():
        lines += textwrap.wrap(paragraph, WIDTH, break_long_words=False, break_on_hyphens=False) or [""]
    return lines


def show_diagnoses_first(shell=None) -> bool:
    """Install, in IPython (or `shell`), the display of failed checks as their message alone.
    Returns whether it did: not outside IPython, nor while nbgrader autogrades."""
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        return False
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None:
        return False

    def show(shell, etype, value, tb, tb_offset=None):
        if not raised_by_a_check(tb):
            return shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        lines = diagnosis_lines(value)
        shell._showtraceback(etype, value, lines)
        return lines

    shell.set_custom_exc((AssertionError,), show)
    return True
