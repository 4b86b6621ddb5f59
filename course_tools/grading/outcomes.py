"""What the grader writes into a graded cell when the cell itself could not say: the names of its
own errors (a kernel that died, a cell past its time, a notebook out of time, a test whose
integrity failed, a message that could not be verified) and the outputs that carry them.

The grading modules write these; the class report (course_tools.jobs.class_report) reads them back
from the autograded notebooks to tell the grader's limits from a student's mistakes.
"""

from __future__ import annotations

from nbformat.notebooknode import NotebookNode

from course_tools.cells import GRADER_OUTCOME_KEY

DIED = "KernelDied"
TIMED_OUT = "CellTimeoutError"
TAMPERED = "TamperingDetected"
OUT_OF_TIME = "OutOfTime"
UNVERIFIED = "UnverifiedKernelMessage"


def error_output(name: str, message: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=name, evalue=message, traceback=[f"{name}: {message}"])


def record_outcome(cell, name: str) -> None:
    """Say in `cell`'s metadata, where no kernel can write, that the grader's own error `name` ended
    it: the class report, feedback and exports read this, never an error output's name."""
    cell.metadata[GRADER_OUTCOME_KEY] = name


def grader_error(cell, name: str, message: str) -> NotebookNode:
    """The grader's own error `name` for `cell`, recorded in its metadata; the output to write."""
    record_outcome(cell, name)
    return error_output(name, message)


def note_output(text: str) -> NotebookNode:
    return NotebookNode(output_type="stream", name="stdout", text=text)



def integrity_error(cell, what: str) -> NotebookNode:
    return grader_error(cell, TAMPERED, f"the grader could not establish this test's integrity ({what}): the "
                        "notebook's code interfered with the grader, so the test does not count.")


def restored_note(undone: list[str], shown: int = 8, name_chars: int = 80) -> str:
    """What a test cell's feedback says when the guard put back what a cell had replaced: at most
    `shown` names of at most `name_chars` characters each (the names are the kernel's to choose)."""
    def short(name: str) -> str:
        return name if len(name) <= name_chars else name[:name_chars] + "..."

    names = ", ".join(short(name) for name in undone[:shown]) + (
        f" and {len(undone) - shown} more" if len(undone) > shown else "")
    return (f"The grader restored what the notebook's code had replaced before this test ran: {names}. "
            "Tests run with the real functions.\n")
