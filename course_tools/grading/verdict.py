"""Test cells judged in the grader's own process: the student's kernel only runs the student's code.

A test cell never reaches the kernel, in any assignment.
The grader runs the notebook's read-only setup cell once in a namespace of its own, then each test
cell's release source there. The names a test reads that neither the setup nor the test binds are
the student's: the kernel says what each one is (`describe`); a value comes back as plain data
(helpers.wire), a function becomes a `helpers.remote.StudentFunction` whose calls, made by the
checks through `run_student`, go to the kernel as one `call` request each: the collector's name,
the function's name and the inputs the check chose. The kernel answers with plain data, and the
check judges it here. The test's source, its hidden part and its references never enter the
kernel, so nothing there can read, patch or print them.
"""

from __future__ import annotations

import builtins
import contextlib
import io

from IPython.core.inputtransformer2 import TransformerManager

from course_tools.cells import is_read_only, is_test
from course_tools.grading.guard_channel import (
    TIMED_OUT,
    KernelLost,
    bound_names,
    error_output,
    integrity_error,
    loaded_names,
    note_output,
    restored_note,
)


class CallLost(BaseException):
    """The kernel did not answer a call (it died, timed out or its guard is gone). A BaseException,
    so that no check's `except Exception` mistakes it for the student's error."""

    def __init__(self, why: str, interrupted: bool = False):
        super().__init__(why)
        self.why, self.interrupted = why, interrupted


def _compiled(source: str, filename: str):
    return compile(TransformerManager().transform_cell(source), filename, "exec", dont_inherit=True)


def _note_undone(cell, reply: dict) -> None:
    if reply.get("undone"):
        cell.outputs.append(note_output(restored_note(reply["undone"])))


class GraderSideTests:
    """Runs one notebook's test cells in the grader's process, for a GuardedExecute."""

    def __init__(self, executor):
        self.executor = executor
        self.namespace: dict | None = None

    def _setup_namespace(self) -> dict:
        """The read-only cells that are not tests (the setup cell), run here once, output dropped."""
        if self.namespace is None:
            namespace = {"__name__": "__course_tests__"}
            for cell in self.executor.nb.cells:
                if is_read_only(cell) and not is_test(cell):
                    quiet = io.StringIO()
                    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                        exec(_compiled(cell.source, "<setup cell>"), namespace)
            self.namespace = namespace
        return self.namespace

    def _students_names(self, index: int, cell, names: list[str]) -> dict:
        from helpers import remote, wire

        reply = self.executor.guard_channel.ask(index, "describe", 60, outputs_into=cell, names=names)
        if reply is None or reply.get("status") != "ok":
            raise CallLost("the kernel did not say what the notebook defines")
        _note_undone(cell, reply)
        values = wire.decode(reply.get("values"), reply.get("buffers") or [])
        found = {}
        for name in names:
            kind = reply["kinds"].get(name)
            if kind == "function":
                found[name] = remote.StudentFunction(name, self._channel(index, cell))
            elif kind == "value" and isinstance(values, dict) and name in values:
                found[name] = values[name]
            elif kind == "unreadable":
                found[name] = _Unreadable(name)
        return found

    def _channel(self, index: int, cell):
        def call(collector: str, function: str, inputs, buffers):
            executor = self.executor
            self._flush_printed(cell)   # what the check printed so far comes before the student's output
            reply = executor.guard_channel.ask(index, "call", executor.cell_timeout(), outputs_into=cell,
                                               buffers=buffers, collector=collector, function=function,
                                               inputs=inputs)
            if reply is None or reply.get("status") == "forged":
                raise CallLost("its request went unanswered" if reply is None
                               else "its answer was not the guard's")
            if reply.get("interrupted"):
                raise CallLost("interrupted", interrupted=True)
            if reply.get("status") == "guard_error":
                if reply.get("ename") == "WireError":
                    raise AssertionError(f"{function} gave the check something it cannot read: "
                                         f"{reply['evalue']}")
                if reply.get("ename") == "NameError":
                    raise NameError(reply.get("evalue"))
                raise CallLost(f"the kernel could not run the check: {reply.get('ename')}: "
                               f"{reply.get('evalue')}")
            _note_undone(cell, reply)
            return reply.get("result"), list(reply.get("buffers") or [])

        return call

    def _flush_printed(self, cell) -> None:
        printed = getattr(self, "_printed", None)
        if printed is not None and printed.getvalue():
            cell.outputs.append(note_output(printed.getvalue()))
            printed.seek(0)
            printed.truncate()

    def run(self, cell, index: int) -> None:
        """Run test cell `cell` here; its outputs are the student's prints, then the test's own."""
        cell.outputs = []
        namespace = dict(self._setup_namespace())
        needed = sorted(loaded_names(cell.source) - bound_names(cell.source) - set(namespace)
                        - set(vars(builtins)))
        printed = self._printed = io.StringIO()
        failure = None
        try:
            namespace.update(self._students_names(index, cell, needed) if needed else {})
            code = _compiled(cell.source, "<test cell>")
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                exec(code, namespace)
        except CallLost as lost:
            failure = lost
        except KernelLost:
            raise
        except Exception as error:  # noqa: BLE001 - a failed check, or the student's value misbehaving
            failure = error
        # Names the test bound stay for the next test cells, as they would in one kernel.
        for name in bound_names(cell.source):
            if name in namespace:
                self.namespace[name] = namespace[name]
        self._flush_printed(cell)
        self._printed = None
        if isinstance(failure, CallLost):
            if failure.interrupted:
                cell.outputs.append(error_output(TIMED_OUT, self.executor.timeout_message()))
                self.executor.fail_cell(index)
                self.executor.check_responsive(index)
            else:
                cell.outputs.append(integrity_error(failure.why))
        elif failure is not None:
            cell.outputs.append(error_output(type(failure).__name__, _message(failure)))


class _Unreadable:
    """A name the student bound to something that cannot travel as plain data."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}: not a plain value>"


def _message(error: BaseException) -> str:
    try:
        return str(error)[:10_000]
    except Exception:  # noqa: BLE001
        return "(its message could not be read)"
