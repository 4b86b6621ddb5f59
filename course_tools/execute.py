"""nbgrader's Execute step, hardened for grading a whole class of submissions.

`GuardedExecute` replaces nbgrader's Execute in `Autograde.autograde_preprocessors`. Each
submission is still graded to completion, in bounded time, whatever its code does:

- a cell that runs past the timeout is interrupted and scored as an error (nbgrader already does
  this); if the kernel ignores the interrupt, it is replaced as if it had died;
- a kernel that dies (os._exit, a segfault, memory beyond the limit) no longer drops the whole
  submission: the cell that killed it gets an error saying so, a fresh kernel re-runs the cells
  before it, and grading goes on from the next cell;
- an output flood is cut at `max_output_chars` per cell while it streams in;
- each kernel runs in a sandbox (course_tools.sandbox) when the machine can make one;
- a guard (course_tools.kernel_guard) undoes patching of checks, torch and builtins before each
  test cell and fails a test during which the code under test patched them.
"""

from __future__ import annotations

import json
from pathlib import Path
from time import monotonic

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbgrader.preprocessors import Execute
from traitlets import Bool, Dict, Integer, Unicode

from course_tools.cells import grade_id, is_read_only, is_test
from course_tools.guarded_cells import (
    DIED,
    OUT_OF_TIME,
    TIMED_OUT,
    BudgetSpent,
    GuardedCells,
    KernelLost,
    error_output,
    note_output,
)
from course_tools.sandbox import SandboxedKernelManager, grading_sandbox


class GuardedExecute(GuardedCells, Execute):
    """nbgrader's Execute that survives dying kernels, floods and patching, in a sandbox."""

    sandbox = Unicode("auto", help="'auto': sandbox kernels when bubblewrap works here; 'off': never; "
                                   "'required': fail grading when it does not work").tag(config=True)
    guard = Bool(True, help="undo and detect patching of checks, torch and builtins").tag(config=True)
    max_output_chars = Integer(200_000, help="stream output kept per cell; the rest is cut").tag(config=True)
    max_kernel_restarts = Integer(3, help="fresh kernels for one notebook after deaths").tag(config=True)
    error_on_timeout = Dict({
        "ename": TIMED_OUT,
        "evalue": "this cell was still running at the grader's time limit and was interrupted: look for a "
                  "loop that never ends, or work far larger than the exercise asks for",
        "traceback": [f"{TIMED_OUT}: this cell was still running at the grader's time limit"],
    }, help="the error a cell gets when it runs past the timeout").tag(config=True)
    submission_timeout = Integer(600, help=(
        "wall-clock seconds for one notebook, kernel starts and replays included; once spent, the "
        "remaining cells are not run and their tests score zero")).tag(config=True)
    cell_times_path = Unicode("", help="append each cell's seconds and outcome to this JSON-lines file"
                              ).tag(config=True)
    interrupt_grace_seconds = Integer(10, help="how long a timed-out kernel may take to answer again"
                                      ).tag(config=True)

    def create_kernel_manager(self):
        status = grading_sandbox(self.sandbox)
        if status.available:
            self.kernel_manager_class = SandboxedKernelManager
        elif self.sandbox == "required":
            raise RuntimeError(status.message)
        else:
            self.log.warning(status.message)
        return super().create_kernel_manager()

    # -- output flood -------------------------------------------------------------------------

    def output(self, outs, msg, display_id, cell_index):
        if msg["msg_type"] == "stream":
            used = sum(len(o.get("text", "")) for o in outs if o.get("output_type") == "stream")
            if used >= self.max_output_chars:
                return None
            text = msg["content"].get("text", "")
            if used + len(text) > self.max_output_chars:
                cut = f"\n... output cut at {self.max_output_chars:,} characters ...\n"
                kept = text[: self.max_output_chars - used] + cut
                msg = {**msg, "content": {**msg["content"], "text": kept}}
        return super().output(outs, msg, display_id, cell_index)

    def _execute(self, cell, index: int) -> None:
        saved_timeout, self.timeout = self.timeout, self._cell_timeout()
        try:
            self.execute_cell(cell, index, store_history=True)
        except DeadKernelError as error:
            raise KernelLost(index, "died") from error
        except CellTimeoutError as error:
            # The time limit passed and, after the interrupt, the kernel never went idle.
            raise KernelLost(index, "unresponsive") from error
        finally:
            self.timeout = saved_timeout
        timed_out = [o for o in cell.outputs if o.output_type == "error" and o.ename == TIMED_OUT]
        for output in timed_out:
            output.evalue = self._timeout_message()
            output.traceback = [f"{TIMED_OUT}: {output.evalue}"]
        if timed_out:
            self._failed_cells.add(index)
            self._check_responsive(index)

    def _run_cell(self, index: int) -> None:
        cell = self.nb.cells[index]
        if self._budget_left() <= 0:
            raise BudgetSpent(index)
        started, outcome = monotonic(), "kernel lost"
        try:
            if self.guard and is_test(cell):
                self._run_test(cell, index)
            elif self.guard and is_read_only(cell):
                self._run_trusted(cell, index)
            else:
                self._execute(cell, index)
            errors = [o.ename for o in cell.outputs if o.output_type == "error"]
            outcome = "timed out" if TIMED_OUT in errors else f"error: {errors[-1]}" if errors else "ok"
        finally:
            self._cell_times.append({"cell": index, "grade_id": grade_id(cell) or "",
                                     "seconds": round(monotonic() - started, 3), "outcome": outcome})

    def _write_cell_times(self) -> None:
        """One JSON line per cell run (replays included), for the grader's timing table."""
        if not self.cell_times_path:
            return
        info = self.resources.get("nbgrader", {})
        path = Path(self.cell_times_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            for row in self._cell_times:
                record = {"student": info.get("student", ""), "notebook": info.get("notebook", ""), **row}
                handle.write(json.dumps(record) + "\n")

    # -- the time budget ----------------------------------------------------------------------

    def _budget_left(self) -> float:
        return self._deadline - monotonic()

    def _cell_timeout(self) -> int:
        return int(max(1, min(self.timeout, self._budget_left())))

    def _timeout_message(self) -> str:
        return self._out_of_time_message() if self._budget_left() <= 1 else self.error_on_timeout["evalue"]

    def _out_of_time_message(self) -> str:
        return (f"this submission used up the grader's time budget of {self.submission_timeout} s per "
                "notebook, so this cell was stopped and the cells after it were not run: look for loops "
                "that never end, or work far larger than the exercises ask for")

    def _check_responsive(self, index: int) -> None:
        """After a timeout: a kernel that does not answer a trivial request is lost."""
        try:
            probe = self._run_quietly("pass", timeout=self.interrupt_grace_seconds)
        except (CellTimeoutError, DeadKernelError) as error:
            raise KernelLost(index, "unresponsive") from error
        if any(o.output_type == "error" for o in probe.outputs):
            raise KernelLost(index, "unresponsive")

    def _record_loss(self, lost: KernelLost) -> None:
        cell = self.nb.cells[lost.index]
        self._failed_cells.add(lost.index)
        if lost.reason == "died":
            message = ("the kernel died while running this cell (os._exit, a crash, or memory beyond the "
                       "grader's limit). A fresh kernel re-ran the cells above and grading went on "
                       "from the next cell.")
        else:
            message = (f"this cell was still running {self.timeout} s after it started, and kept running "
                       "after the interrupt (does it catch KeyboardInterrupt?). A fresh kernel re-ran the "
                       "cells above and grading went on from the next cell.")
        if not any(o.output_type == "error" for o in cell.outputs) or lost.reason == "died":
            cell.outputs.append(error_output(DIED, message))
        else:
            cell.outputs.append(note_output(message + "\n"))

    def _not_run(self, start: int, name: str, message: str) -> None:
        for cell in self.nb.cells[start:]:
            if cell.cell_type == "code":
                cell.outputs = [error_output(name, message)]

    def preprocess(self, nb, resources=None, km=None):
        from nbclient import NotebookClient

        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        self._failed_cells: set[int] = set()
        self._deadline = monotonic() + self.submission_timeout
        self._cell_times: list[dict] = []
        code_cells = [i for i, c in enumerate(self.nb.cells) if c.cell_type == "code"]
        start, restarts = 0, 0
        while True:
            try:
                with self.setup_kernel():
                    info = self.wait_for_reply(self.kc.kernel_info())
                    self.nb.metadata["language_info"] = info["content"]["language_info"]
                    self._install_guard()
                    replay = [i for i in code_cells if i < start and i not in self._failed_cells]
                    for index in replay + [i for i in code_cells if i >= start]:
                        self._run_cell(index)
                break
            except BudgetSpent as spent:
                self.km, self.kc = None, None
                self.log.warning("time budget of %d s spent at cell %d", self.submission_timeout, spent.index)
                self._not_run(spent.index, OUT_OF_TIME, "not run: " + self._out_of_time_message())
                break
            except KernelLost as lost:
                self.km, self.kc = None, None
                self._record_loss(lost)
                restarts += 1
                start = lost.index + 1
                self.log.warning("kernel lost (%s) in cell %d; %s", lost.reason, lost.index,
                                 "restarting" if restarts <= self.max_kernel_restarts else "giving up")
                if restarts > self.max_kernel_restarts:
                    self._not_run(start, DIED, "not run: the kernel died too many times in the cells above")
                    break
        self.set_widgets_metadata()
        self._write_cell_times()
        return self.nb, self.resources

