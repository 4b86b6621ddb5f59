"""Reference measurements and diagnoses for the memory lesson's exercises (lesson 04).

Each check chooses the inputs, has the student's function run on them by its collector in
helpers.collect.memory (through helpers.transport.remote: in the same process in the student's notebook, in
the sandboxed kernel at grading), measures the truth here (a real optimizer step, the saved-tensor
meter, the peak of a forward and backward done the reference's way and the known wrong ways) and
raises an AssertionError that names the mistake it recognises. An exception the student's code
raised becomes an AssertionError saying what the lesson says about it; NotImplementedError (the
unanswered stub) passes through unchanged.

One module per exercise: training_bytes (Exercise 1), saved_bytes (Exercise 2),
checkpoint_segments (Exercise 3), plan (Exercise 4), and shared for what more than one of them
needs. This package re-exports the names the lesson's test cells use (`checks_memory.<name>`), and
measure_training_bytes, the reference a student could call as their answer.

At grading the sandbox stubs every module under helpers/checks/, this package's own __init__
included (a folder rule in course_tools/grading/sandbox_command.py): its references are the
exercises' answers, and the student's kernel never needs them.
"""

from helpers.checks.memory.checkpoint_segments import check_checkpointed_forward
from helpers.checks.memory.plan import check_plan, check_plan_raises
from helpers.checks.memory.saved_bytes import check_saved_bytes
from helpers.checks.memory.training_bytes import check_training_bytes, measure_training_bytes
from helpers.collect.memory import PeakMeasure

__all__ = [
    "PeakMeasure",
    "check_checkpointed_forward",
    "check_plan",
    "check_plan_raises",
    "check_saved_bytes",
    "check_training_bytes",
    "measure_training_bytes",
]
