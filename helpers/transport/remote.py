"""One check, two transports: the verdict is reached where the check runs, never in the student's process.

A check that calls a student's function is written in two halves:

- a *collector* (registered with `@collector`) runs next to the student's code: it gets the
  student's function and the check's inputs, calls the function and returns what came out as
  plain data (values, tensors, what the student's code raised, what a spy counted);
- the check itself chooses the inputs, computes the reference and judges what the collector
  returned.

`run_student(function, collect, *inputs)` joins them. In the student's own notebook (running a
test cell, Validate) both halves run in one process, the inputs and the result still making the
round trip through helpers.transport.wire, so a check behaves the same on both transports. At grading the
test cell runs in the grader's process: the student's functions there are `StudentFunction`s,
names the grader asks the sandboxed kernel to call, and only the collector's plain data comes
back. A test may also call one directly (`assert add(1, 2) == 3`): that is `plain_call`, one
round trip that returns the value as exact built-in types. A kernel can then lie about what
the student's function returned only by returning the right answer, which is solving the
exercise; what only the student's process can observe (a count of calls, a warning) can cost
points when it shows a broken requirement, never earn them.
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from helpers.transport import wire
from helpers.transport.errors import (
    MESSAGE_UNREADABLE,
    Raised,
    answer_unreadable,
    failure,
    not_a_function,
    unreadable_value,
)

_COLLECTORS: dict[str, Callable] = {}


def collector(function: Callable) -> Callable:
    """Register a kernel half: `function(student_function, *inputs) -> plain data`."""
    _COLLECTORS[f"{function.__module__}.{function.__qualname__}"] = function
    return function


def _registered(name: str) -> Callable:
    module, _, _ = name.rpartition(".")
    if name not in _COLLECTORS and module.startswith("helpers."):
        importlib.import_module(module)
    if name not in _COLLECTORS:
        raise LookupError(f"{name} is not a registered collector")
    return _COLLECTORS[name]


NOT_MEASURED_HERE = ("measured only at grading, from outside the kernel (its memory cgroup); "
                     "here the lesson's in-kernel evidence judges")


@dataclass(frozen=True)
class MemoryPeak:
    """What the grader read from outside the kernel over one call of the student's function: the
    most bytes the kernel's memory cgroup held at once during the call (`peak`), what it held just
    before it (`before`), and what it held right after the notebook's setup cell, before any of the
    student's code ran (`baseline`). All None, with `why_not`, where no measure was taken: in the
    student's own notebook, or on a grader without a memory cgroup of each kernel's own."""

    peak: int | None = None
    before: int | None = None
    baseline: int | None = None
    why_not: str = NOT_MEASURED_HERE

    @property
    def measured(self) -> bool:
        return all(type(value) is int for value in (self.peak, self.before, self.baseline))

    def held(self, allowance: int) -> int:
        """The bytes the call held at its peak, above what the kernel held before it; memory the
        notebook took (or took and freed, the allocator keeping it) since the setup cell counts as
        the call's beyond `allowance`, so a kernel cannot hide a peak by raising its usage first."""
        if not self.measured:
            raise ValueError(f"no memory peak was measured: {self.why_not}")
        return self.peak - min(self.before, self.baseline + allowance)


class StudentFunction:
    """At grading, in the grader's process: the student's function, called in the kernel by name.
    `measures_memory`: the grader can read the peak of a call from the kernel's memory cgroup."""

    def __init__(self, name: str, channel: Callable, measures_memory: bool = False):
        self.__name__ = self.name = name
        self.channel = channel
        self.measures_memory = measures_memory
        self._done: set[str] = set()

    def first_time(self, what: str) -> bool:
        """True the first time a check asks about `what` for this function (one test cell's)."""
        first = what not in self._done
        self._done.add(what)
        return first

    def __call__(self, *args, **kwargs):
        """A plain call from a test (`assert add(1, 2) == 3`): the arguments travel to the kernel, the
        student's function runs there, and only what it returned comes back, as plain data; what it
        raised becomes the test's failure, in the course's words."""
        outcome = run_student(self, plain_call, *args, **kwargs)
        raise_if_raised(self.name, outcome)
        return outcome["value"]

    def __repr__(self) -> str:
        return f"<the student's {self.name}>"


def _student_line(error: BaseException) -> str:
    """The last line of the traceback that is the student's code: not torch's, nor the course's."""
    lines = [frame.line or "" for frame in traceback.extract_tb(error.__traceback__)
             if not any(part in frame.filename for part in _LIBRARY_PARTS)]
    return lines[-1].strip()[:200] if lines else ""


_LIBRARY_PARTS = ("site-packages", "dist-packages", "/helpers/", "/lib/python")


def called(function: Callable, *args, **kwargs) -> dict:
    """Collector-side: {"value": what function returned} or {"raised": {"type", "message", "line"}}.

    A KeyboardInterrupt (the grader's timeout) is not caught."""
    try:
        return {"value": function(*args, **kwargs)}
    except Exception as error:  # noqa: BLE001 - every error of the student's is reported, as data
        try:
            message = str(error)
        except Exception:  # noqa: BLE001 - an exception whose str() fails still gets reported
            message = MESSAGE_UNREADABLE
        return {"raised": {"type": type(error).__name__, "message": message[:4000],
                           "line": _student_line(error)}}


def raised_of(outcome: dict) -> Raised | None:
    """Check-side: the Raised in a `called` outcome, or None; NotImplementedError (the untouched
    stub) is raised again, so the student reads it as they wrote it."""
    raised = outcome.get("raised") if isinstance(outcome, dict) else None
    if not isinstance(raised, dict):
        return None
    line = raised.get("line")
    result = Raised(str(raised.get("type")), str(raised.get("message")),
                    line if isinstance(line, str) else "")
    if result.type == "NotImplementedError":
        raise NotImplementedError(result.message)
    return result


def raise_if_raised(function: str, outcome: dict, **wording) -> None:
    """failure(...) raised if the collector's `outcome` says the student's function raised."""
    error = raised_of(outcome)
    if error is not None:
        raise failure(function, error, **wording)


@collector
def plain_call(function: Callable, *args, **kwargs) -> dict:
    """The collector of a plain call: what function(*args, **kwargs) returned or raised."""
    from helpers.transport.capture import stderr_on_stdout

    with stderr_on_stdout():
        return called(function, *args, **kwargs)


def serve(name: str, function: Callable, tree, buffers) -> tuple[object, list[bytes]]:
    """The kernel half: rebuild the inputs, run the registered collector, encode what it returns."""
    args, kwargs = wire.decode(tree, buffers, objects=True)
    return wire.encode(_registered(name)(function, *args, **kwargs))


def measures_memory(function) -> bool:
    """Whether a call of `function` through run_student_measured gets a peak read from outside."""
    return isinstance(function, StudentFunction) and function.measures_memory


def run_student_measured(function, collect: Callable, *args, **kwargs) -> tuple[object, MemoryPeak]:
    """run_student, and the memory peak of the call as the grader read it from the kernel's memory
    cgroup (MemoryPeak; unmeasured in the student's own notebook, or on a grader without one)."""
    if not measures_memory(function):
        return run_student(function, collect, *args, **kwargs), MemoryPeak()
    peak: list[MemoryPeak] = []
    return _run(function, collect, args, kwargs, peak), peak[0]


def run_student(function, collect: Callable, *args, **kwargs):
    """collect(function, *args, **kwargs) where `function` lives; its plain-data result, read here."""
    return _run(function, collect, args, kwargs, None)


def _run(function, collect: Callable, args: tuple, kwargs: dict, peak: list | None):
    name = f"{collect.__module__}.{collect.__qualname__}"
    if not isinstance(function, StudentFunction) and not callable(function):
        raise not_a_function(function)
    tree, buffers = wire.encode([list(args), kwargs], objects=True)
    if isinstance(function, StudentFunction) and peak is not None:
        result_tree, result_buffers, measured = function.channel(name, function.name, tree, buffers,
                                                                 measure_memory=True)
        peak.append(measured)
    elif isinstance(function, StudentFunction):
        result_tree, result_buffers = function.channel(name, function.name, tree, buffers)
    else:
        try:
            result_tree, result_buffers = serve(name, function, tree, buffers)
        except wire.WireError as error:   # what the student's function returned cannot travel
            raise unreadable_value(getattr(function, "__name__", "your function"), error) from None
    try:
        return wire.decode(result_tree, result_buffers)
    except wire.WireError as error:   # the kernel's answer, as the grader received it
        raise answer_unreadable(getattr(function, "__name__", "your function"), error) from None
