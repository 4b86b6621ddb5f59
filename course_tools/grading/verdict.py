"""Test cells judged in the grader's own process: the student's kernel only runs the student's code.

A test cell never reaches the kernel, in any assignment.
The grader runs the notebook's read-only setup cell once in a namespace of its own, then each test
cell's release source there. The names a test reads that neither the setup nor the test binds are
the student's: the kernel says what each one is (`describe`); a value comes back as plain data
(helpers.transport.wire), a function becomes a `helpers.transport.remote.StudentFunction` whose
calls, made by the checks through `run_student`, go to the kernel as one `call` request each: the
collector's name, the function's name and the inputs the check chose. The kernel answers with
plain data, and the check judges it here. The test's source, its hidden part and its references
never enter the kernel, so nothing there can read, patch or print them.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import tempfile

from IPython.core.inputtransformer2 import TransformerManager

from course_tools.cells import DIAGNOSIS_KEY, is_read_only, is_test
from course_tools.grading.guard_channel import GuardChannel, KernelLost, bound_names, loaded_names
from course_tools.grading.kernel_messages import MAX_NOTEBOOK_REPLY_BYTES, MAX_REPLY_BYTES
from course_tools.grading.memory_cgroups import PeakReading
from course_tools.grading.notebook_session import NotebookSession
from course_tools.grading.outcomes import (
    TIMED_OUT,
    error_output,
    grader_error,
    integrity_error,
    note_output,
    restored_note,
)
from helpers.diagnosis import report_group
from helpers.transport import errors


class CallLost(BaseException):
    """The kernel did not answer a call (it died, timed out or its guard is gone). A BaseException,
    so that no check's `except Exception` mistakes it for the student's error."""

    def __init__(self, why: str, interrupted: bool = False):
        super().__init__(why)
        self.why, self.interrupted = why, interrupted


def _compiled(source: str, filename: str):
    return compile(TransformerManager().transform_cell(source), filename, "exec", dont_inherit=True)


class CappedText(io.TextIOBase):
    """A text stream that keeps its first `limit` characters and counts the rest: what a test prints
    here (a student's returned value, say) never grows the grader past the output caps."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit, self.kept, self.dropped = limit, [], 0
        self._size = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        room = self.limit - self._size
        if room > 0:
            self.kept.append(text[:room])
            self._size += min(len(text), room)
        self.dropped += max(len(text) - max(room, 0), 0)
        return len(text)

    def take(self) -> str:
        """What was written since the last take, with a line saying how much was dropped."""
        text = "".join(self.kept) + (f"\n... {self.dropped:,} more characters printed by the test, not kept\n"
                                     if self.dropped else "")
        self.kept, self.dropped, self._size = [], 0, 0
        return text


class GraderSideTests:
    """Runs one notebook's test cells in the grader's process: the session is the notebook being
    graded, the channel how a test reaches the student's code in its kernel."""

    def __init__(self, session: NotebookSession, channel: GuardChannel):
        self.session, self.channel = session, channel
        self.namespace: dict | None = None
        self._printed: CappedText | None = None
        self._reply_bytes = 0
        # What the setup and test cells make in temporary folders here (lesson 04's snapshot folder,
        # say) lives in one folder per graded notebook, removed with it (close()).
        self._scratch = tempfile.TemporaryDirectory(prefix="course-grader-")

    def close(self) -> None:
        self._scratch.cleanup()

    @contextlib.contextmanager
    def _in_scratch(self):
        saved, tempfile.tempdir = tempfile.tempdir, self._scratch.name
        try:
            yield
        finally:
            tempfile.tempdir = saved

    def _bounded_buffers(self, reply: dict, what: str) -> list:
        """The reply's tensor bytes, or a failure when they pass what one reply, or all of this
        notebook's replies together, may carry (kernel_messages.MAX_REPLY_BYTES and
        MAX_NOTEBOOK_REPLY_BYTES): they are dropped at once, so the grader holds none of them."""
        buffers = reply.pop("buffers", None) or []
        size = sum(len(buffer) for buffer in buffers) if isinstance(buffers, list) else 0
        self._reply_bytes += size
        if size > MAX_REPLY_BYTES:
            buffers.clear()
            raise AssertionError(f"{what} holds {size / 2**20:.0f} MiB of tensors, more than the "
                                 f"{MAX_REPLY_BYTES // 2**20} MiB a check reads: return what the exercise "
                                 "asks for, at the size the test gives")
        if self._reply_bytes > MAX_NOTEBOOK_REPLY_BYTES:
            buffers.clear()
            raise CallLost(f"the kernel's answers passed {MAX_NOTEBOOK_REPLY_BYTES // 2**20} MiB in this "
                           "notebook")
        return list(buffers)

    def _output(self, cell, index: int, output) -> None:
        """An output the grader writes into test cell `index`: capped as the kernel's are."""
        self.session.append_output(cell, index, output)

    def _note_undone(self, cell, index: int, reply: dict) -> None:
        undone = reply.get("undone")
        if undone and isinstance(undone, list):
            self._output(cell, index, note_output(restored_note([str(name) for name in undone[:50]])))

    def _setup_namespace(self) -> dict:
        """The read-only cells that are not tests (the setup cell), run here once, output dropped."""
        if self.namespace is None:
            namespace = {"__name__": "__course_tests__"}
            for cell in self.session.cells:
                if is_read_only(cell) and not is_test(cell):
                    quiet = CappedText(0)
                    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet), \
                            self._in_scratch():
                        exec(_compiled(cell.source, "<setup cell>"), namespace)
            self.namespace = namespace
        return self.namespace

    def _students_names(self, index: int, cell, names: list[str]) -> dict:
        from helpers.transport import remote, wire

        # As long as a call may take, and never past the notebook's time budget.
        reply = self.channel.ask(index, "describe", min(60, self.session.time_left()), outputs_into=cell,
                                 names=names)
        if reply is None or reply.get("status") != "ok":
            raise CallLost("the kernel did not say what the notebook defines")
        self._note_undone(cell, index, reply)
        values = wire.decode(reply.get("values"), self._bounded_buffers(reply, "the notebook's values"))
        found = {}
        for name in names:
            kind = reply["kinds"].get(name)
            if kind == "function":
                found[name] = remote.StudentFunction(name, self._channel(index, cell),
                                                     measures_memory=self._measures_memory())
            elif kind == "value" and isinstance(values, dict) and name in values:
                found[name] = values[name]
            elif kind == "unreadable":
                found[name] = _Unreadable(name)
        return found

    def _measures_memory(self) -> bool:
        """Whether the kernel has a memory cgroup of its own and its baseline was read."""
        return (getattr(getattr(self.session, "kernel_manager", None), "memory_cgroup", None) is not None
                and getattr(self.session, "memory_baseline", None) is not None)

    def _memory_peak(self, reading: PeakReading):
        from helpers.transport.remote import MemoryPeak

        baseline = getattr(self.session, "memory_baseline", None)
        if reading.peak is None or reading.before is None or baseline is None:
            return MemoryPeak(why_not="the grader could not read the kernel's memory cgroup over this call")
        return MemoryPeak(peak=reading.peak, before=reading.before, baseline=baseline, why_not="")

    def _channel(self, index: int, cell):
        def call(collector: str, function: str, inputs, buffers, measure_memory: bool = False):
            # What the check printed so far comes before the student's output.
            self._flush_printed(cell, index)
            reading = PeakReading() if measure_memory else None
            reply = self.channel.ask(index, "call", self.session.time_left(), outputs_into=cell,
                                     buffers=buffers, memory=reading, collector=collector, function=function,
                                     inputs=inputs)
            if reply is None or reply.get("status") == "forged":
                raise CallLost("its request went unanswered" if reply is None
                               else "its answer was not the guard's")
            if reply.get("interrupted"):
                raise CallLost("interrupted", interrupted=True)
            if reply.get("status") == "guard_error":
                if reply.get("ename") == "WireError":
                    raise errors.unreadable_value(function, reply["evalue"])
                if reply.get("ename") == "NameError":
                    raise NameError(reply.get("evalue"))
                raise CallLost(f"the kernel could not run the check: {reply.get('ename')}: "
                               f"{reply.get('evalue')}")
            self._note_undone(cell, index, reply)
            buffers = self._bounded_buffers(reply, f"what {function} returned")
            if reading is not None:
                return reply.get("result"), buffers, self._memory_peak(reading)
            return reply.get("result"), buffers

        return call

    def _flush_printed(self, cell, index: int) -> None:
        if self._printed is not None:
            text = self._printed.take()
            if text:
                self._output(cell, index, note_output(text))

    def run(self, cell, index: int) -> None:
        """Run test cell `cell` here; its outputs are the student's prints, then the test's own."""
        cell.outputs = []
        namespace = dict(self._setup_namespace())
        needed = sorted(loaded_names(cell.source) - bound_names(cell.source) - set(namespace)
                        - set(vars(builtins)))
        printed = self._printed = CappedText(self.session.max_output_chars)
        failure = None
        try:
            namespace.update(self._students_names(index, cell, needed) if needed else {})
            code = _compiled(cell.source, "<test cell>")
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed), self._in_scratch():
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
        self._flush_printed(cell, index)
        self._printed = None
        if isinstance(failure, CallLost):
            if failure.interrupted:
                self._output(cell, index, grader_error(cell, TIMED_OUT, self.session.timeout_message()))
                self.session.fail_cell(index)
                self.session.check_responsive(index)
            else:
                self._output(cell, index, integrity_error(cell, failure.why))
        elif failure is not None:
            self._output(cell, index, error_output(type(failure).__name__, _message(failure)))
            group = report_group(failure)
            if group is not None:
                cell.metadata[DIAGNOSIS_KEY] = group


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
        return errors.MESSAGE_UNREADABLE
