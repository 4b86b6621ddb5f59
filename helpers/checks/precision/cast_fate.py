"""Exercise 1, the fate of a cast: its reference (torch's own cast, in the grader) and the check of
the student's cast_fate, value by value in float16 and bfloat16."""

from __future__ import annotations

from collections.abc import Callable

import torch

from helpers.collect.precision import collect_cast_fate
from helpers.diagnosis import mistake
from helpers.transport import errors, remote

# Errors a realistic mistake makes torch (or Python) raise inside an exercise of lesson 01, matched
# on the message's own words, and what the course says about each. A pattern appears only in the
# error its mistake causes, so each fixed text is shown only when its cause is the cause.
CAST_FATE_ERRORS = (
    errors.Known("if_on_whole_tensor", "Boolean value of Tensor with more than one value is ambiguous",
                 "an `if` compared whole tensors: decide the fate of one value at a time (for example over "
                 "values.tolist() and the cast values' .tolist())"),
    errors.Known("item_on_whole_tensor", "cannot be converted to Scalar",
                 ".item() or float() was called on the whole tensor: take one value at a time"),
    errors.Known("dtype_of_python_float", "'float' object has no attribute",
                 "values.tolist() gives Python floats, which have no dtype: cast the whole tensor first "
                 "(values.to(dtype)), then compare value by value"),
)


def cast_fate_reference(values: torch.Tensor, dtype: torch.dtype) -> list[str]:
    """Exercise 1's answer, computed from torch's own cast: one fate per value of 1-D float32 `values`."""
    cast = values.to(dtype).float()
    normal = torch.finfo(dtype).smallest_normal
    return ["overflow" if c.isinf() else "underflow" if c == 0 else "subnormal" if c.abs() < normal
            else "exact" if c == v else "rounded" for v, c in zip(values, cast, strict=True)]


def check_cast_fate(cast_fate: Callable, values: torch.Tensor, reference: Callable = cast_fate_reference,
                    unseen: bool = False) -> None:
    """Exercise 1: assert cast_fate(values, dtype) equals reference(values, dtype) (torch's own cast,
    here in the grader) for float16 and bfloat16, value by value (each value printed exactly, as
    float32 holds it). With `unseen`, one message counts the wrong fates of the hidden values and
    shows the first."""
    for dtype in (torch.float16, torch.bfloat16):
        outcome = remote.run_student(cast_fate, collect_cast_fate, values, dtype)
        remote.raise_if_raised("cast_fate", outcome, known=CAST_FATE_ERRORS,
                               expected=f"returns one fate per value in {dtype}")
        got = outcome["value"]
        want = reference(values, dtype)
        if not (isinstance(got, list) and len(got) == len(want)):
            shown = f"{len(got)} items" if unseen and isinstance(got, list) else repr(got)
            raise mistake("wrong_return_type",
                          f"cast_fate should return a list with one string per value ({len(want)}), "
                          f"got {shown}")
        wrong = [(v, g, w) for v, g, w in zip(values.tolist(), got, want, strict=True) if g != w]
        if unseen and wrong:
            v, g, w = wrong[0]
            raise mistake("wrong_fate",
                          f"on unseen values in {dtype}, {len(wrong)} fates are wrong, e.g. "
                          f"{v:.9g} should be {w!r}, not {g!r}")
        if wrong:
            v, g, w = wrong[0]
            raise mistake("wrong_fate", f"in {dtype}, {v:.9g} should be {w!r}, your function says {g!r}")
