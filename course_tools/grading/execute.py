"""nbgrader's Execute step, hardened for grading a whole class of submissions.

`GuardedExecute` replaces nbgrader's Execute in `Autograde.autograde_preprocessors`. Each
submission is still graded to completion, in bounded time, whatever its code does:

- a cell that runs past the timeout is interrupted and scored as an error (nbgrader already does
  this); if the kernel ignores the interrupt, it is replaced as if it had died;
- a kernel that dies (os._exit, a segfault, memory beyond the limit) no longer drops the whole
  submission: the cell that killed it gets an error saying so, a fresh kernel re-runs the cells
  before it, and grading goes on from the next cell;
- outputs of every kind are cut at `max_output_chars` per cell and `max_notebook_output_chars` per
  notebook while they stream in (an error output is shortened, never dropped);
- a message from the kernel that does not verify (a forged signature, a replay, a malformed
  message) is dropped and fails the cell that was running, instead of ending the notebook;
- a test cell's points come only from whether it raised: nbgrader would take a test cell's
  `execute_result` as its score (and a non-number as full marks), and code under test can emit
  one, so test cells keep such outputs as plain displays;
- each kernel runs in a sandbox (course_tools.grading.sandbox) when the machine can make one;
- test cells run in the grader's process (course_tools.grading.verdict), calling the student's functions
  in the kernel through a guard (course_tools.grading.kernel_guard) that first undoes patching of
  helpers, torch and builtins.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from time import monotonic

from nbclient.exceptions import CellExecutionComplete, CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from nbformat import from_dict
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Bool, Dict, Integer, Unicode, default

from course_tools.cells import (
    DIAGNOSIS_KEY,
    GRADER_OUTCOME_KEY,
    MEMORY_MEASURED_KEY,
    grade_id,
    is_read_only,
    is_test,
)
from course_tools.grading.cell_order import release_notebook
from course_tools.grading.demonstrations import SKIP_TAG, skipped_at_grading
from course_tools.grading.guard_channel import BudgetSpent, GuardChannel, KernelLost, bound_names
from course_tools.grading.kernel_messages import CheckedSession
from course_tools.grading.kernel_output import KernelOutputRelay
from course_tools.grading.outcomes import (
    DIED,
    OUT_OF_TIME,
    TIMED_OUT,
    UNVERIFIED,
    error_output,
    grader_error,
    integrity_error,
    note_output,
    record_outcome,
)
from course_tools.grading.sandbox import SandboxedKernelManager, grading_sandbox
from course_tools.grading.sandbox_command import shown_in_sandbox
from course_tools.grading.verdict import GraderSideTests
from helpers.checks.variants import SECRET_ENVIRONMENT, grading_student

# The row of the cell-times file that counts a kernel's start (sandbox, Python, ipykernel, guard).
KERNEL_START = "(kernel start)"
SKIPPED_NOTE = ("(not run while grading: a demonstration that no test reads; its output is in your own "
                "notebook)\n")
# The longest error message and traceback kept: an error output is never dropped, since it is
# what makes a test cell lose its points.
ERROR_TEXT_CHARS = 10_000


def output_chars(output: dict) -> int:
    """How many characters an output (or a message's content) adds to a notebook."""
    if "text" in output:
        return len(str(output["text"]))
    if "traceback" in output or "ename" in output:
        return (len(str(output.get("ename", ""))) + len(str(output.get("evalue", "")))
                + sum(len(str(line)) for line in output.get("traceback") or []))
    size = 0
    for value in (output.get("data") or {}).values():
        size += len(value) if isinstance(value, str) else len(json.dumps(value, default=str))
    return size + len(json.dumps(output.get("metadata") or {}, default=str))


_secret_from_environment: list[str | None] = []
# Where a variant secret file lies outside every folder the sandbox shows (the home folder is not
# bound; only the Python environment and the course's packages are, wherever they lie).
SECRET_SUGGESTION = "~/.config/efficient-pytorch/variant-secret"


def variant_secret(path: str = "") -> str | None:
    """The course's variant secret: the file's first line, or the environment variable, which is
    taken out of this process's environment on first read so that no kernel started later (one
    without the sandbox's clean environment) inherits it."""
    if path:
        path = os.path.expanduser(path)
        shown_by = shown_in_sandbox(path)
        if shown_by is not None:
            raise ValueError(
                f"the variant secret file {path} lies under {shown_by}, which every graded kernel's sandbox "
                "shows read-only: a student's code could print it and recompute a classmate's hidden "
                f"inputs. Keep it outside those folders, for example at {SECRET_SUGGESTION} (chmod 600)")
        secret = Path(path).read_text().strip()
        if not secret:
            raise ValueError(f"the variant secret file {path} is empty")
        return secret
    if not _secret_from_environment:
        _secret_from_environment.append(os.environ.pop(SECRET_ENVIRONMENT, None) or None)
    return _secret_from_environment[0]


class GuardedExecute(Execute):
    """nbgrader's Execute that survives dying kernels, floods and patching, in a sandbox."""

    sandbox = Unicode("auto", help="'auto': sandbox kernels when bubblewrap works here; 'off': never; "
                                   "'required': fail grading when it does not work").tag(config=True)
    tests_in_grader = Bool(True, help=(
        "judge test cells in the grader's process, reaching the student's code through the kernel "
        "guard; False runs them in the kernel as stock nbgrader does (never for grading)")).tag(config=True)
    max_output_chars = Integer(200_000, help="output kept per cell, of every kind; the rest is cut"
                               ).tag(config=True)
    max_notebook_output_chars = Integer(2_000_000, help="output kept per notebook; the rest is cut"
                                        ).tag(config=True)
    store_widget_state = Bool(False, help="widget models are not kept: a graded notebook is read, not "
                                          "re-rendered live").tag(config=True)
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
    skip_demonstrations = Bool(True, help=(
        f"skip the release's demonstration cells tagged {SKIP_TAG!r} that the submission left unchanged "
        "and that no cell run reads (course_tools.grading.demonstrations)")).tag(config=True)
    cell_times_path = Unicode("", help="append each cell's seconds and outcome to this JSON-lines file"
                              ).tag(config=True)
    interrupt_grace_seconds = Integer(10, help="how long a timed-out kernel may take to answer again"
                                      ).tag(config=True)
    variant_secret_file = Unicode("", help=(
        "a file holding the course's secret that makes hidden tests' inputs differ per student "
        f"(helpers.checks.variants); when empty, the environment variable {SECRET_ENVIRONMENT} is read. "
        "Without either, hidden tests use their published inputs")).tag(config=True)

    @default("shutdown_kernel")
    def _shutdown_kernel_default(self) -> str:
        # A graded kernel's state is thrown away: a graceful shutdown only waits (about 0.9 s of a
        # 5 s submission) for Python and torch to tear themselves down.
        return "immediate"

    async def async_start_new_kernel(self, **kwargs) -> None:
        """Start the kernel with a capped relay as its stdout and stderr, never the grader's own."""
        relay = KernelOutputRelay()
        try:
            await super().async_start_new_kernel(stdout=relay.write_fd, stderr=relay.write_fd, **kwargs)
        finally:
            relay.close_writer()

    # nbclient binds start_new_kernel to its own coroutine: bind it to this one.
    start_new_kernel = run_sync(async_start_new_kernel)

    def create_kernel_manager(self):
        status = grading_sandbox(self.sandbox)
        if status.available:
            self.kernel_manager_class = SandboxedKernelManager
            # In the log of every grading run (nbgrader's API hands it to the formgrader and CLI).
            self.log.info(status.message)
        elif self.sandbox == "required":
            raise RuntimeError(status.message)
        else:
            self.log.warning(status.message)
        manager = super().create_kernel_manager()
        # Before the kernel starts, so that its connection file carries this session's key.
        manager.session = CheckedSession(parent=manager)
        return manager

    # -- untrusted kernel messages -----------------------------------------------------------

    def process_message(self, msg, cell, cell_index):
        """nbclient's handling, except that a message it cannot read (a forged-but-signed one whose
        content has the wrong shape, say) is rejected instead of ending the notebook."""
        try:
            return super().process_message(msg, cell, cell_index)
        except CellExecutionComplete:
            raise
        except Exception as error:
            self._rejected_by_executor.append(f"{type(error).__name__} while reading a {msg.get('msg_type')}")
            return None

    def on_comm_open_jupyter_widget(self, msg):
        """No widget models while grading: an Output widget would capture a cell's outputs."""
        return None

    def _rejected_messages(self) -> int:
        session = getattr(self.kc, "session", None)  # the client holds a clone of the manager's session
        return len(getattr(session, "rejected", ())) + len(self._rejected_by_executor)

    def _fail_on_rejected_messages(self, cell, index: int, before: int) -> None:
        count = self._rejected_messages() - before
        if count <= 0:
            return
        self._failed_cells.add(index)
        cell.outputs.append(grader_error(cell, UNVERIFIED, (
            f"while this cell ran, the kernel sent {count} message{'s' if count > 1 else ''} the grader "
            "could not verify (a bad signature, a replay or a malformed message: prints, plots and errors "
            "never send these). They were ignored, this cell does not count, and grading went on.")))

    # -- output caps ----------------------------------------------------------------------------

    def _room_for_output(self, cell_index: int) -> int:
        in_cell = self.max_output_chars - self._cell_chars.get(cell_index, 0)
        in_notebook = self.max_notebook_output_chars - sum(self._cell_chars.values())
        return max(0, min(in_cell, in_notebook))

    def _charge(self, cell_index: int, chars: int) -> None:
        self._cell_chars[cell_index] = self._cell_chars.get(cell_index, 0) + chars

    def _note_cut(self, outs, cell_index: int) -> None:
        if cell_index not in self._cut_cells:
            self._cut_cells.add(cell_index)
            limit = min(self.max_output_chars, self.max_notebook_output_chars)
            outs.append(note_output(f"\n... output cut at {limit:,} characters (the grader keeps "
                                    f"{self.max_output_chars:,} per cell and "
                                    f"{self.max_notebook_output_chars:,} per notebook) ...\n"))

    def _fitted(self, cell_index: int, kind: str, content: dict) -> dict | None:
        """An output's `content` as the caps keep it, charged to its cell; None when it is dropped.
        An error is shortened, never dropped (it is what makes a test lose its points); a stream is
        cut to the room left; anything else that does not fit is dropped."""
        room, size = self._room_for_output(cell_index), output_chars(content)
        if kind == "error":
            content = {**content, "evalue": str(content.get("evalue", ""))[:ERROR_TEXT_CHARS],
                       "traceback": self._shortened(content.get("traceback") or [])}
            size = output_chars(content)
        elif size > room and kind == "stream" and room > 0:
            content, size = {**content, "text": str(content.get("text", ""))[:room]}, room
        elif size > room:
            return None
        self._charge(cell_index, size)
        return content

    def append_output(self, cell, cell_index: int, output) -> None:
        """An output the grader itself writes into a cell (what a test printed, a note, a failure),
        kept as the kernel's outputs are."""
        kind = output.get("output_type")
        kept = self._fitted(cell_index, kind, output)
        if kept is not None:
            cell.outputs.append(from_dict(kept))
        if kept is None or (kind == "stream" and self._room_for_output(cell_index) <= 0):
            self._note_cut(cell.outputs, cell_index)

    def output(self, outs, msg, display_id, cell_index):
        if self.clear_before_next_output:
            self._cell_chars[cell_index] = 0
        kind = msg["msg_type"]
        kept = self._fitted(cell_index, kind, msg["content"])
        if kept is None:
            self._note_cut(outs, cell_index)
            return None
        out = super().output(outs, {**msg, "content": kept}, display_id, cell_index)
        if self._room_for_output(cell_index) <= 0 and kind == "stream":
            self._note_cut(outs, cell_index)
        return out

    def clear_output(self, outs, msg, cell_index):
        super().clear_output(outs, msg, cell_index)
        if not outs:
            self._cell_chars[cell_index] = 0

    @staticmethod
    def _shortened(traceback: list) -> list[str]:
        kept, used = [], 0
        for line in reversed([str(line) for line in traceback]):
            if used + len(line) > ERROR_TEXT_CHARS:
                break
            kept.insert(0, line)
            used += len(line)
        return kept

    def _update_display_id(self, display_id, msg):
        """An update replaces the data of earlier displays: it is charged, and cut, like new output."""
        targets = self._display_id_map.get(display_id, {})
        size = output_chars(msg["content"])
        for cell_index, positions in targets.items():
            outputs = self.nb.cells[cell_index].outputs
            for position in positions:
                if position < len(outputs):
                    growth = size - output_chars(outputs[position])
                    if growth > self._room_for_output(cell_index):
                        note = {"text/plain": "(a display update was cut: the grader's output limit)"}
                        msg = {**msg, "content": {**msg["content"], "data": note, "metadata": {}}}
                        size = output_chars(msg["content"])
                    else:
                        self._charge(cell_index, max(0, growth))
        return super()._update_display_id(display_id, msg)

    def _execute(self, cell, index: int) -> None:
        saved_timeout, self.timeout = self.timeout, self.cell_timeout()
        self._timed_out = False
        try:
            self.execute_cell(cell, index, store_history=True)
        except DeadKernelError as error:
            raise KernelLost(index, "died") from error
        except CellTimeoutError as error:
            # The time limit passed and, after the interrupt, the kernel never went idle.
            raise KernelLost(index, "unresponsive") from error
        finally:
            self.timeout = saved_timeout
        # Only nbclient's own timeout counts: a kernel can print an error of that name itself.
        if self._timed_out:
            record_outcome(cell, TIMED_OUT)
            for output in cell.outputs:
                if output.output_type == "error" and output.ename == TIMED_OUT:
                    output.evalue = self.timeout_message()
                    output.traceback = [f"{TIMED_OUT}: {output.evalue}"]
            self.fail_cell(index)
            self.check_responsive(index)

    async def _async_handle_timeout(self, timeout: int, cell=None):
        self._timed_out = True
        return await super()._async_handle_timeout(timeout, cell)

    def _run_read_only(self, cell, index: int) -> None:
        """A read-only cell that is not a test (the setup cell): IPython runs it, with its hooks
        put back first, and the guard remembers the globals it bound."""
        reply = self.guard_channel.ask(index, "reset", 60)
        self._execute(cell, index)
        if not self._student_code_ran:
            self._memory_baseline = self._memory_usage()
        if reply is None or reply.get("status") != "ok":
            cell.outputs.append(integrity_error(cell, "the guard did not answer before this cell"))
            return
        self.guard_channel.ask(index, "remember", 60, names=sorted(bound_names(cell.source)))

    def _run_cell(self, index: int) -> None:
        cell = self.nb.cells[index]
        if self._budget_left() <= 0:
            raise BudgetSpent(index)
        started, outcome = monotonic(), "kernel lost"
        if index in self._skipped:
            cell.outputs, cell.execution_count = [note_output(SKIPPED_NOTE)], None
            self._cell_times.append({"cell": index, "grade_id": "", "seconds": 0.0, "outcome": "skipped"})
            return
        rejected_before = self._rejected_messages()
        try:
            if self.tests_in_grader and is_test(cell):
                self._grader_tests.run(cell, index)
            elif self.tests_in_grader and is_read_only(cell):
                self._run_read_only(cell, index)
            else:
                self._student_code_ran = True
                self._execute(cell, index)
            self._fail_on_rejected_messages(cell, index, rejected_before)
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

    def _memory_usage(self) -> int | None:
        """What the kernel's memory cgroup holds now, read by the grader; None without one."""
        cgroup = getattr(self.km, "memory_cgroup", None)
        try:
            return None if cgroup is None else cgroup.usage()
        except OSError:
            return None

    def _budget_left(self) -> float:
        return self._deadline - monotonic()

    def cell_timeout(self) -> int:
        return int(max(1, min(self.timeout, self._budget_left())))

    def timeout_message(self) -> str:
        return self._out_of_time_message() if self._budget_left() <= 1 else self.error_on_timeout["evalue"]

    def _out_of_time_message(self) -> str:
        return (f"this submission used up the grader's time budget of {self.submission_timeout} s per "
                "notebook, so this cell was stopped and the cells after it were not run: look for loops "
                "that never end, or work far larger than the exercises ask for")

    def fail_cell(self, index: int) -> None:
        """Cell `index` ended in an error: a fresh kernel after a loss does not replay it."""
        self._failed_cells.add(index)

    def check_responsive(self, index: int) -> None:
        """After a timeout: a kernel that does not answer a trivial request is lost."""
        try:
            probe = self.guard_channel.run_quietly("pass", timeout=self.interrupt_grace_seconds)
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
        record_outcome(cell, DIED)
        if not any(o.output_type == "error" for o in cell.outputs) or lost.reason == "died":
            cell.outputs.append(error_output(DIED, message))
        else:
            cell.outputs.append(note_output(message + "\n"))

    def _not_run(self, start: int, name: str, message: str) -> None:
        for cell in self.nb.cells[start:]:
            if cell.cell_type == "code":
                cell.outputs = [grader_error(cell, name, message)]

    def preprocess(self, nb, resources=None, km=None):
        from nbclient import NotebookClient

        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        self._skipped = self._demonstrations_to_skip()
        self._failed_cells: set[int] = set()
        self._deadline = monotonic() + self.submission_timeout
        self._cell_times: list[dict] = []
        session = ExecutorSession(self)
        self.guard_channel = GuardChannel(session)
        self._grader_tests = GraderSideTests(session, self.guard_channel)
        self._cell_chars: dict[int, int] = {}
        self._cut_cells: set[int] = set()
        self._rejected_by_executor: list[str] = []
        for cell in self.nb.cells:   # only the grader writes these (course_tools.cells)
            cell.metadata.pop(DIAGNOSIS_KEY, None)
            cell.metadata.pop(GRADER_OUTCOME_KEY, None)
        code_cells = [i for i, c in enumerate(self.nb.cells) if c.cell_type == "code"]
        student = (self.resources.get("nbgrader") or {}).get("student")
        self.nb.metadata.pop(MEMORY_MEASURED_KEY, None)
        self._memory_measured = True
        try:
            with grading_student(variant_secret(self.variant_secret_file), student):
                self._run_cells_with_fresh_kernels(code_cells)
        finally:
            self._grader_tests.close()   # what the tests made here goes with the notebook
        self.nb.metadata[MEMORY_MEASURED_KEY] = self._memory_measured
        self._results_are_not_scores()
        self._write_cell_times()
        return self.nb, self.resources

    def _run_cells_with_fresh_kernels(self, code_cells: list[int]) -> None:
        """Run every code cell; a kernel lost in a cell is replaced, and the cells above replayed."""
        start, restarts = 0, 0
        while True:
            try:
                starting = monotonic()
                with self.setup_kernel():
                    info = self.wait_for_reply(self.kc.kernel_info())
                    self.nb.metadata["language_info"] = info["content"]["language_info"]
                    if self.tests_in_grader:
                        self.guard_channel.install()
                    self._student_code_ran, self._memory_baseline = False, self._memory_usage()
                    self._memory_measured &= self._memory_baseline is not None
                    self._cell_times.append({"cell": -1, "grade_id": KERNEL_START,
                                             "seconds": round(monotonic() - starting, 3), "outcome": "ok"})
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

    def _demonstrations_to_skip(self) -> set[int]:
        if not (self.tests_in_grader and self.skip_demonstrations) or "nbgrader" not in self.resources:
            return set()
        release = release_notebook(self.config, self.resources)
        return set() if release is None else skipped_at_grading(self.nb.cells, release.cells)

    def _results_are_not_scores(self) -> None:
        """nbgrader scores a test cell by its first execute_result (a non-number: full marks) before
        it looks for an error. The course's tests pass or raise; whatever the code under test
        displayed stays visible, as a display that nbgrader does not read as a score."""
        for cell in self.nb.cells:
            if cell.cell_type == "code" and is_test(cell):
                cell.outputs = [NotebookNode(output_type="display_data", data=o.get("data", {}),
                                             metadata=o.get("metadata", {}))
                                if o.output_type == "execute_result" else o for o in cell.outputs]


class ExecutorSession:
    """The notebook a GuardedExecute grades, as its guard channel and verdict see it
    (course_tools.grading.notebook_session.NotebookSession): what they may read and do, no more."""

    def __init__(self, executor: GuardedExecute):
        self._executor = executor

    @property
    def cells(self) -> list[NotebookNode]:
        return self._executor.nb.cells

    @property
    def max_output_chars(self) -> int:
        return self._executor.max_output_chars

    @property
    def interrupt_grace_seconds(self) -> int:
        return self._executor.interrupt_grace_seconds

    @property
    def kernel_client(self):
        return self._executor.kc

    @property
    def kernel_manager(self):
        return self._executor.km

    @property
    def memory_baseline(self) -> int | None:
        return getattr(self._executor, "_memory_baseline", None)

    def time_left(self) -> int:
        return self._executor.cell_timeout()

    def timeout_message(self) -> str:
        return self._executor.timeout_message()

    def append_output(self, cell, index: int, output) -> None:
        self._executor.append_output(cell, index, output)

    def fail_cell(self, index: int) -> None:
        self._executor.fail_cell(index)

    def check_responsive(self, index: int) -> None:
        self._executor.check_responsive(index)

    def process_message(self, message: dict, cell, index: int) -> None:
        self._executor.process_message(message, cell, index)

    def run_extra_cell(self, cell, timeout: int) -> None:
        executor = self._executor
        # nbclient stores an executed cell back at its index: give this one a slot of its own.
        executor.nb.cells.append(cell)
        saved_timeout, executor.timeout = executor.timeout, timeout
        try:
            executor.execute_cell(cell, len(executor.nb.cells) - 1, store_history=False)
        finally:
            executor.timeout = saved_timeout
            executor.nb.cells.pop()
