"""Reference steps and diagnoses for the mixed-precision exercises (lesson 01).

Each check chooses the inputs, has the student's function run on them by its collector in
helpers.collect.precision (through helpers.transport.remote: in the same process in the student's notebook,
in the sandboxed kernel at grading), computes the truth here (the same autocast step on a copy of
the model, a replay of the forward pass under autocast) and raises an AssertionError naming the
mistake it recognises. What the spies saw in the student's process can explain a failure or cost
points, never earn them: a pass also needs the right outcome (the parameters after the step, the
report, the scale), judged here. An error the student's code raised becomes an AssertionError in
the course's words; NotImplementedError (the unanswered stub) passes through unchanged.

One module per exercise, each with the errors it names in the course's words:
- cast_fate: Exercise 1, the fate of each value cast to float16 and bfloat16;
- autocast_audit: Exercise 2, the audit's report of each leaf's dtype and what it left on the model;
- amp_train_step: Exercise 3, one scaled, clipped step and a step whose gradients hold inf;
- evidence: what the audit and the step checks share, reading the tensors a collector sent back.
The GradScaler call pattern and clip_grads, shared with lesson 02, are in helpers.checks.amp_calls.
This module re-exports what the lesson's test cells use.

Its references are the exercises' answers and the student's kernel never needs them: inside the
grading sandbox every module under helpers/checks/ is replaced by a stub (a folder rule in
course_tools/grading/sandbox_command.py), this package's own __init__ included.
"""

from helpers.checks.precision.amp_train_step import (
    amp_reference_step,
    check_amp_step_skips_inf,
    check_amp_train_step,
)
from helpers.checks.precision.autocast_audit import check_autocast_audit
from helpers.checks.precision.cast_fate import cast_fate_reference, check_cast_fate
from helpers.collect.precision import ReusedLeafModel

__all__ = [
    "ReusedLeafModel",
    "amp_reference_step",
    "cast_fate_reference",
    "check_amp_step_skips_inf",
    "check_amp_train_step",
    "check_autocast_audit",
    "check_cast_fate",
]
