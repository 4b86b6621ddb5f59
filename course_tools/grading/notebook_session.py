"""What the layers grading one notebook share: one small interface, not the executor itself.

GuardedExecute (execute.py) grades a notebook cell by cell. Two layers work for it: the guard
channel (guard_channel.py) talks to the guard in the kernel, and the verdict (verdict.py) runs
the test cells in the grader's process. Each gets a `NotebookSession`, and nothing else of the
executor: the notebook's cells, the kernel's client and manager, the time a cell may still take,
how the grader writes an output into a cell (under the same caps as the kernel's), and what a
timeout needs (failing the cell, checking that the kernel still answers). So each file reads
alone, and tests/grading/test_verdict.py runs the verdict against a fake session, with no kernel at all.
"""

from __future__ import annotations

from typing import Protocol

from nbformat.notebooknode import NotebookNode


class NotebookSession(Protocol):
    """One notebook being graded, as the guard channel and the verdict see it."""

    cells: list[NotebookNode]
    max_output_chars: int          # what one cell's outputs may hold
    interrupt_grace_seconds: int   # how long an interrupted kernel may take to answer again

    # What the kernel's memory cgroup held right after the setup cell, before any of the student's
    # code ran in this kernel (None: no cgroup of its own, or not read yet).
    memory_baseline: int | None

    def time_left(self) -> int:
        """Seconds a cell may still run: the cell timeout, never past the notebook's budget."""

    def timeout_message(self) -> str:
        """What a cell stopped at the time limit is told (the budget's words once it is spent)."""

    def append_output(self, cell: NotebookNode, index: int, output: dict) -> None:
        """Write an output of the grader's own into cell `index`, capped as the kernel's are."""

    def fail_cell(self, index: int) -> None:
        """Cell `index` ended in an error: a fresh kernel after a loss does not replay it."""

    def check_responsive(self, index: int) -> None:
        """After a timeout in cell `index`: raise KernelLost when the kernel no longer answers."""

    # The kernel, for the guard channel.
    @property
    def kernel_client(self): ...

    @property
    def kernel_manager(self): ...

    def process_message(self, message: dict, cell: NotebookNode, index: int) -> None:
        """Handle one iopub message of cell `index` as a cell's own (CellExecutionComplete at idle)."""

    def run_extra_cell(self, cell: NotebookNode, timeout: int) -> None:
        """Run a cell that is not the notebook's (grader code), with its own timeout."""
