"""The grader's side of the kernel guard (course_tools.grading.kernel_guard): how GuardedExecute runs cells.

Test cells never reach the kernel: the grader runs them in its own process (verdict.py). What
a test needs from the student's notebook travels as a request in a kernel message of the guard's
own (`course_guard_request`, with a nonce): `describe` the names the test reads, or `call` one of
the student's functions through a collector, with plain data in and plain data out. The guard
answers on the shell channel; a missing, failed or forged answer fails the test with "could not
establish this test's integrity". Read-only cells that are not tests (the setup cell) run through
IPython after the guard has put the interpreter's hooks back, and the guard remembers what they
bound. `GuardChannel` holds that conversation for one notebook's grading, through the session
GuardedExecute hands it (course_tools.grading.notebook_session), never the executor itself.
"""

from __future__ import annotations

import ast
import secrets
from pathlib import Path
from queue import Empty
from time import monotonic

from nbclient.exceptions import CellExecutionComplete
from nbclient.util import ensure_async, run_sync
from nbformat.notebooknode import NotebookNode

from course_tools.grading import kernel_guard
from course_tools.grading.memory_cgroups import PeakReading
from course_tools.grading.notebook_session import NotebookSession

REPLY_GRACE_SECONDS = 2


def bound_names(source: str) -> set[str]:
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


def loaded_names(source: str) -> set[str]:
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        tree = ast.parse(TransformerManager().transform_cell(source))
    except (SyntaxError, ValueError, ImportError):
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


class KernelLost(Exception):
    def __init__(self, index: int, reason: str):
        super().__init__(reason)
        self.index = index
        self.reason = reason


class BudgetSpent(Exception):
    def __init__(self, index: int):
        super().__init__(index)
        self.index = index


class GuardChannel:
    """Grader code in the kernel, and requests to the guard, over one notebook session's kernel."""

    def __init__(self, session: NotebookSession):
        self.session = session

    def run_quietly(self, code: str, timeout: int = 60) -> NotebookNode:
        """Run grader code in the kernel; return the cell so that its outputs can be read."""
        cell = NotebookNode(cell_type="code", source=code, metadata={}, outputs=[], execution_count=None)
        self.session.run_extra_cell(cell, timeout)
        return cell

    def install(self) -> None:
        """Start the guard in the kernel, before any cell of the notebook runs."""
        source = (Path(__file__).parent / "kernel_guard.py").read_text()
        cell = self.run_quietly(
            "def _install_course_guard(source):\n"
            "    namespace = {'__name__': '_course_guard'}\n"
            "    exec(compile(source, 'course_guard', 'exec'), namespace)\n"
            "    namespace['install']()\n"
            "_install_course_guard(" + repr(source) + ")\n"
            "del _install_course_guard\n", timeout=300)
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if errors:
            raise RuntimeError(f"the grading guard failed to start: {errors[0].ename}: {errors[0].evalue}")

    def ask(self, index: int, op: str, timeout: float, outputs_into=None, buffers=None,
            memory: PeakReading | None = None, **args) -> dict | None:
        """Send the guard one request over its own kernel message (never through IPython's input
        pipeline) and return its reply, or None when the kernel went idle without one. Tensors
        travel as the message's `buffers`, both ways (the reply's under "buffers"). What the kernel
        prints meanwhile goes to `outputs_into`; a kernel that dies or ignores the interrupt after
        `timeout` raises KernelLost for cell `index`. `memory`, where given, is filled with the
        kernel's memory cgroup's usage before the request and its peak until the reply (left empty
        where the kernel has no cgroup of its own): read here, outside the kernel."""
        cgroup = getattr(getattr(self.session, "kernel_manager", None), "memory_cgroup", None)
        if memory is None or cgroup is None:
            return run_sync(self._ask)(index, op, timeout, outputs_into, args, buffers)
        with cgroup.peak_over() as reading:
            reply = run_sync(self._ask)(index, op, timeout, outputs_into, args, buffers)
        memory.before, memory.peak = reading.before, reading.peak
        return reply

    async def _ask(self, index, op, timeout, outputs_into, args, buffers=None) -> dict | None:
        session, client, manager = self.session, self.session.kernel_client, self.session.kernel_manager
        nonce = secrets.token_hex(16)
        request = client.session.msg(kernel_guard.REQUEST, {"op": op, "args": args, "nonce": nonce})
        request["buffers"] = list(buffers or [])
        client.shell_channel.send(request)
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
                    raise KernelLost(index, "unresponsive")
                interrupted = True
                await ensure_async(manager.interrupt_kernel())
                deadline = monotonic() + session.interrupt_grace_seconds
            if monotonic() >= next_alive_check:
                next_alive_check = monotonic() + 1
                if not await ensure_async(manager.is_alive()):
                    raise KernelLost(index, "died")
            try:
                message = await ensure_async(client.iopub_channel.get_msg(timeout=0.05))
            except Empty:
                message = None
            if message is not None and message["parent_header"].get("msg_id") == msg_id:
                try:
                    session.process_message(message, target, index)
                except CellExecutionComplete:
                    idle, idle_at = True, monotonic()
            if reply is None:
                try:
                    answer = await ensure_async(client.shell_channel.get_msg(timeout=0))
                except Empty:
                    answer = None
                if answer is not None and answer["parent_header"].get("msg_id") == msg_id:
                    content = answer["content"]
                    reply = ({**content, "buffers": list(answer.get("buffers") or [])}
                             if (answer["msg_type"] == kernel_guard.REPLY and content.get("nonce") == nonce)
                             else {"status": "forged"})
        if reply is not None and interrupted:
            reply = {**reply, "interrupted": True}
        return reply
