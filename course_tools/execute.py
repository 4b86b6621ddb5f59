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

import ast
import json
import secrets
from pathlib import Path
from queue import Empty
from time import monotonic

import nbformat
from nbclient.exceptions import CellExecutionComplete, CellTimeoutError, DeadKernelError
from nbclient.util import ensure_async, run_sync
from nbformat.notebooknode import NotebookNode
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Bool, Dict, Integer, Unicode

from course_tools import kernel_guard
from course_tools.cells import grade_id, is_read_only, is_test, nbgrader_metadata
from course_tools.sandbox import SandboxedKernelManager, grading_sandbox

DIED = "KernelDied"
TIMED_OUT = "CellTimeoutError"
TAMPERED = "TamperingDetected"
OUT_OF_TIME = "OutOfTime"
REPLY_GRACE_SECONDS = 2


def _bound_names(source: str) -> set[str]:
    """Global names a cell binds at its top level (imports, assignments, defs)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        tree = ast.parse(TransformerManager().transform_cell(source))
    except (SyntaxError, ValueError, ImportError):
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        else:
            names.update(n.id for n in ast.walk(node)
                         if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return names


def _loaded_names(source: str) -> set[str]:
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        tree = ast.parse(TransformerManager().transform_cell(source))
    except (SyntaxError, ValueError, ImportError):
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _error(name: str, message: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=name, evalue=message, traceback=[f"{name}: {message}"])


def _note(text: str) -> NotebookNode:
    return NotebookNode(output_type="stream", name="stdout", text=text)


class _KernelLost(Exception):
    def __init__(self, index: int, reason: str):
        super().__init__(reason)
        self.index = index
        self.reason = reason


class _OutOfTime(Exception):
    def __init__(self, index: int):
        super().__init__(index)
        self.index = index


class GuardedExecute(Execute):
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

    # -- the guard ----------------------------------------------------------------------------

    def _run_quietly(self, code: str, timeout: int = 60) -> NotebookNode:
        """Run grader code in the kernel; return the cell so that its outputs can be read."""
        cell = NotebookNode(cell_type="code", source=code, metadata={}, outputs=[], execution_count=None)
        # nbclient stores an executed cell back at its index: give this one a slot of its own.
        self.nb.cells.append(cell)
        saved_timeout, self.timeout = self.timeout, timeout
        try:
            self.execute_cell(cell, len(self.nb.cells) - 1, store_history=False)
        finally:
            self.timeout = saved_timeout
            self.nb.cells.pop()
        return cell

    def _install_guard(self) -> None:
        if not self.guard:
            return
        source = (Path(__file__).parent / "kernel_guard.py").read_text()
        cell = self._run_quietly(
            "def _install_course_guard(source):\n"
            "    namespace = {'__name__': '_course_guard'}\n"
            "    exec(compile(source, 'course_guard', 'exec'), namespace)\n"
            "    namespace['install']()\n"
            "_install_course_guard(" + repr(source) + ")\n"
            "del _install_course_guard\n", timeout=300)
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if errors:
            raise RuntimeError(f"the grading guard failed to start: {errors[0].ename}: {errors[0].evalue}")

    def _ask_guard(self, index: int, op: str, timeout: float, outputs_into=None, **args) -> dict | None:
        """Send the guard one request over its own kernel message (never through IPython's input
        pipeline) and return its reply, or None when the kernel went idle without one."""
        return run_sync(self._async_ask_guard)(index, op, timeout, outputs_into, args)

    async def _async_ask_guard(self, index, op, timeout, outputs_into, args) -> dict | None:
        nonce = secrets.token_hex(16)
        request = self.kc.session.msg(kernel_guard.REQUEST, {"op": op, "args": args, "nonce": nonce})
        self.kc.shell_channel.send(request)
        msg_id = request["header"]["msg_id"]
        scratch = NotebookNode(cell_type="code", source="", metadata={}, outputs=[], execution_count=None)
        target = outputs_into if outputs_into is not None else scratch
        target.metadata.setdefault("execution", {})
        reply, idle, interrupted, idle_at = None, False, False, 0.0
        deadline, next_alive_check = monotonic() + timeout, monotonic() + 1
        # The reply travels on the shell channel and may arrive just after the idle status on
        # iopub; a guard that was removed never replies, and the kernel goes idle all the same.
        while not idle or (reply is None and monotonic() < idle_at + REPLY_GRACE_SECONDS):
            if not idle and monotonic() >= deadline:
                if interrupted:
                    raise _KernelLost(index, "unresponsive")
                interrupted = True
                await ensure_async(self.km.interrupt_kernel())
                deadline = monotonic() + self.interrupt_grace_seconds
            if monotonic() >= next_alive_check:
                next_alive_check = monotonic() + 1
                if not await ensure_async(self.km.is_alive()):
                    raise _KernelLost(index, "died")
            try:
                message = await ensure_async(self.kc.iopub_channel.get_msg(timeout=0.05))
            except Empty:
                message = None
            if message is not None and message["parent_header"].get("msg_id") == msg_id:
                try:
                    self.process_message(message, target, index)
                except CellExecutionComplete:
                    idle, idle_at = True, monotonic()
            if reply is None:
                try:
                    answer = await ensure_async(self.kc.shell_channel.get_msg(timeout=0))
                except Empty:
                    answer = None
                if answer is not None and answer["parent_header"].get("msg_id") == msg_id:
                    content = answer["content"]
                    reply = content if (answer["msg_type"] == kernel_guard.REPLY
                                        and content.get("nonce") == nonce) else {"status": "forged"}
        if reply is not None and interrupted:
            reply = {**reply, "interrupted": True}
        return reply

    def _integrity_error(self, what: str) -> NotebookNode:
        return _error(TAMPERED, f"the grader could not establish this test's integrity ({what}): the "
                                "notebook's code interfered with the grader, so the test does not count.")

    def _run_test(self, cell, index: int) -> None:
        cell.outputs = []
        reply = self._ask_guard(
            index, "run_test", self._cell_timeout(), outputs_into=cell, source=cell.source,
            filename=f"<test cell {grade_id(cell) or index}>",
            loaded=sorted(_loaded_names(cell.source)), bound=sorted(_bound_names(cell.source)))
        if reply is None or reply.get("status") != "ok":
            if reply is None:
                why = "its request went unanswered"
            elif reply.get("status") == "guard_error":
                why = f"the guard failed: {reply.get('ename')}: {reply.get('evalue')}"
            else:
                why = "its answer was not the guard's"
            cell.outputs.append(self._integrity_error(why))
            return
        if reply["undone"]:
            cell.outputs.insert(0, _note(
                "The grader restored what the notebook's code had replaced before this test ran: "
                + ", ".join(reply["undone"]) + ". Tests run with the real functions.\n"))
        if reply.get("interrupted"):
            cell.outputs.append(_error(TIMED_OUT, self._timeout_message()))
            self._failed_cells.add(index)
            self._check_responsive(index)
        elif reply["ename"] is not None:
            cell.outputs.append(_error(reply["ename"], reply["evalue"]))
        if reply["tampered"]:
            cell.outputs.append(_error(TAMPERED, "while this test ran, the code under test replaced "
                                       + ", ".join(reply["tampered"]) + "; the test does not count."))

    def _run_trusted(self, cell, index: int) -> None:
        """A read-only cell that is not a test (the setup cell): IPython runs it, with its hooks
        put back first, and the guard remembers the globals it bound."""
        reply = self._ask_guard(index, "reset", 60)
        self._execute(cell, index)
        if reply is None or reply.get("status") != "ok":
            cell.outputs.append(self._integrity_error("the guard did not answer before this cell"))
            return
        self._ask_guard(index, "remember", 60, names=sorted(_bound_names(cell.source)))

    def _execute(self, cell, index: int) -> None:
        saved_timeout, self.timeout = self.timeout, self._cell_timeout()
        try:
            self.execute_cell(cell, index, store_history=True)
        except DeadKernelError as error:
            raise _KernelLost(index, "died") from error
        except CellTimeoutError as error:
            # The time limit passed and, after the interrupt, the kernel never went idle.
            raise _KernelLost(index, "unresponsive") from error
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
            raise _OutOfTime(index)
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
            raise _KernelLost(index, "unresponsive") from error
        if any(o.output_type == "error" for o in probe.outputs):
            raise _KernelLost(index, "unresponsive")

    def _record_loss(self, lost: _KernelLost) -> None:
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
            cell.outputs.append(_error(DIED, message))
        else:
            cell.outputs.append(_note(message + "\n"))

    def _not_run(self, start: int, name: str, message: str) -> None:
        for cell in self.nb.cells[start:]:
            if cell.cell_type == "code":
                cell.outputs = [_error(name, message)]

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
            except _OutOfTime as spent:
                self.km, self.kc = None, None
                self.log.warning("time budget of %d s spent at cell %d", self.submission_timeout, spent.index)
                self._not_run(spent.index, OUT_OF_TIME, "not run: " + self._out_of_time_message())
                break
            except _KernelLost as lost:
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


class RestoreCellOrder(NbGraderPreprocessor):
    """Put the read-only and graded cells back in the release's order, and bring back deleted
    read-only cells (the setup cell, for one), so that every test runs after the code it tests.

    Runs after OverwriteCells (which restores the content and type of those cells, and deleted
    test cells). A student's own cells travel with the nbgrader cell above them.
    """

    def preprocess(self, nb, resources):
        release = self._release_notebook(resources)
        if release is None:
            return nb, resources
        order = [grade_id(c) for c in release.cells if grade_id(c)]
        rank = {name: position for position, name in enumerate(order)}
        head, blocks = [], []
        for cell in nb.cells:
            if grade_id(cell) in rank:
                blocks.append([cell])
            elif blocks:
                blocks[-1].append(cell)
            else:
                head.append(cell)
        present = {grade_id(block[0]) for block in blocks}
        for cell in release.cells:
            name = grade_id(cell)
            if name and name not in present and nbgrader_metadata(cell).get("locked"):
                self.log.warning("Restoring deleted read-only cell %s", name)
                restored = nbformat.from_dict(cell)
                if restored.cell_type == "code":
                    restored.outputs, restored.execution_count = [], None
                blocks.append([restored])
        if [grade_id(b[0]) for b in blocks] != sorted((grade_id(b[0]) for b in blocks), key=rank.get):
            self.log.warning("Restoring the release's cell order")
        blocks.sort(key=lambda block: rank[grade_id(block[0])])
        nb.cells = head + [cell for block in blocks for cell in block]
        return nb, resources

    def _release_notebook(self, resources):
        coursedir = CourseDirectory(config=self.config)
        info = resources["nbgrader"]
        path = Path(coursedir.format_path(coursedir.release_directory, ".", info["assignment"])) / (
            info["notebook"] + ".ipynb")
        if not path.exists():
            self.log.warning("No release notebook at %s: the cell order is not checked", path)
            return None
        return nbformat.read(path, as_version=4)

    def preprocess_cell(self, cell, resources, index):
        return cell, resources

