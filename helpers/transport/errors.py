"""The course's words for what goes wrong when a check runs a student's function, in one place.

`failure` is how every check says that the student's function raised (the lesson's known causes
first, then the causes every lesson shares, COMMON_ERRORS); `unreadable_value` and `not_a_function`
are what a check says when what came back, or what it was handed, cannot be judged. The judges
(helpers/checks/), the transport (helpers.transport.remote) and the grader's verdict
(course_tools.grading.verdict) all word these failures through here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from helpers.diagnosis import mistake

# What stands for an exception's text when str() of it fails.
MESSAGE_UNREADABLE = "(its message could not be read)"


@dataclass(frozen=True)
class Raised:
    """What a student's function raised, as the check reads it: the exception's type name, its
    text and the line of the student's own code that raised it (empty when unknown)."""

    type: str
    message: str
    line: str = ""

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"


class Known(tuple):
    """An error whose cause a check knows, as failure() reads it: the pair (pattern, the course's
    words), matched on the error's message, that also carries `mistake`, the name of the mistake it
    diagnoses (helpers.diagnosis.mistake). It unpacks as that pair: `pattern, words = known`."""

    mistake: str

    def __new__(cls, name: str, pattern: str, words: str) -> Known:
        known = super().__new__(cls, (pattern, words))
        known.mistake = name
        return known


# The name of a failure whose cause no check recognised: the student's function raised.
FUNCTION_RAISED = "function_raised"

# Errors whose cause is the same in every lesson, worded once. Each is matched on Python's or
# torch's own message, so its words appear only when that message is the error.
COMMON_ERRORS = (
    Known("none_used_as_tensor", "'NoneType' object has no attribute",
          "your code used a None as if it were a tensor. In these exercises that None is usually a "
          "parameter's .grad: it is None on a fresh model until the first backward, and after "
          "zero_grad(set_to_none=True). Clear old gradients with optimizer.zero_grad(set_to_none=True) "
          "(or model.zero_grad), which handles both"),
    Known("backward_without_graph", "element 0 of tensors does not require grad and does not have a grad_fn",
          "backward ran on a tensor that autograd did not record: the loss was computed under "
          "torch.no_grad() or from detached values (.detach(), .item(), a new tensor)"),
    Known("backward_twice", "Trying to backward through the graph a second time",
          "backward ran twice through the same graph: run one forward for every backward"),
    Known("inplace_before_backward", "modified by an inplace operation",
          "a tensor that autograd saved for a backward pass was changed in place before that backward "
          "ran. In these exercises it is usually optimizer.step(), which updates the parameters in "
          "place, running between a forward pass and its backward: step only after the last backward "
          "of the cycle"),
    Known("mixed_devices", "Expected all tensors to be on the same device",
          "tensors on different devices met in one operation: move every batch and every running "
          "total to the model's device (next(model.parameters()).device)"),
)


def failure(function: str, error: Raised, *, known: Sequence[tuple[str, str]] = (), advice: str = "",
            expected: str = "", cause: str = FUNCTION_RAISED) -> AssertionError:
    """The one way a check says that the student's `function` raised `error` while it was tested.

    The lesson's `known` errors (pattern, the course's words) are tried first, then `advice`,
    which a check that knows the cause from its own inputs passes, then the errors every lesson
    shares (COMMON_ERRORS). An error nobody recognises is not explained: the message says what the test was
    checking (`expected`, e.g. "returns one float per update") and where the student's code
    raised, without guessing a cause.

    The failure carries the name of the mistake that explains it (helpers.diagnosis.mistake): a
    `Known` error's own, `cause` for `advice` (only used with it), else FUNCTION_RAISED."""
    where = f" at `{error.line}`" if error.line else ""
    said = f"{function} stopped with {error}{where}"
    # Each of these is recognised by the text or type the student's code raised (by_error_text).
    for entry in known:
        pattern, words = entry
        if pattern in error.message:
            return mistake(getattr(entry, "mistake", FUNCTION_RAISED), f"{said}; {words}", by_error_text=True)
    if advice:
        return mistake(cause, f"{said}; {advice}", by_error_text=True)
    for entry in COMMON_ERRORS:
        pattern, words = entry
        if pattern in error.message:
            return mistake(entry.mistake, f"{said}; {words}", by_error_text=True)
    checking = f"that {function} {expected}" if expected else "what the exercise asks"
    return mistake(FUNCTION_RAISED,
                   f"{said}; the test was checking {checking}, and the error comes from your code "
                   "(run this test cell in your notebook to see its traceback)")


def unreadable_value(function: str, error) -> AssertionError:
    """What the student's `function` gave the check cannot travel or be read (helpers.transport.wire)."""
    return mistake("unreadable_value", f"{function} gave the check something it cannot read: {error}")


def answer_unreadable(function: str, error) -> AssertionError:
    """The kernel's answer for `function` could not be read as the grader received it."""
    return mistake("unreadable_value", f"the kernel's answer for {function} could not be read: {error}")


def not_a_function(value) -> AssertionError:
    """The name the check calls holds something that is not a function."""
    return mistake("not_a_function", f"the check calls your function here, but that name holds a "
                                     f"{type(value).__name__}: {repr(value)[:80]}")
