"""The headline figures a notebook measured, for `make gpu-check`'s report; a no-op otherwise.

A notebook calls `record("bf16 step", 12.5, "ms")` where it prints a figure worth reporting. When
the GPU check runs the notebook it sets `COURSE_FIGURES` to a file, and each call appends one JSON
line there; in JupyterLab, in CI and while grading the variable is unset and nothing is written.
So the report shows what the student's notebook measured, never a second copy of the measurement.
"""

from __future__ import annotations

import json
import math
import numbers
import os

FIGURES_ENV = "COURSE_FIGURES"


def record(name: str, value: float | int | str, unit: str = "") -> None:
    """Append one figure (a finite number or a short text, with its unit) to $COURSE_FIGURES."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"record() needs a figure name, got {name!r}")
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise TypeError(f"record({name!r}, ...) takes a number or a text, got {type(value).__name__}")
    if isinstance(value, numbers.Real):
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"record({name!r}, {value}): the figure is not a finite number")
    path = os.environ.get(FIGURES_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as figures:
        figures.write(json.dumps({"name": name.strip(), "value": value, "unit": unit}) + "\n")
