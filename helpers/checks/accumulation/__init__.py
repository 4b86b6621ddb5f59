"""Reference runs and diagnoses for the gradient-accumulation exercises (lesson 02).

Each check chooses the inputs, has the student's loop run on them by its collector in
helpers.collect.accumulation (through helpers.transport.remote: in the same process in the student's
notebook, in the sandboxed kernel at grading) and judges what came back here: the returned
losses, the final parameters and the gradient each optimizer.step saw, against a reference
computed on a copy of the model from whole, concatenated batches (the thing accumulation must
reproduce). When they differ, the check recomputes the gradients that each classic mistake would
have produced and names the mistake that matches. What the spies counted in the student's
process (backward passes, steps, the GradScaler's calls) is evidence from that process: it can
fail a check, and explains a failure, but a pass always needs the right parameters and losses.
An error of the student's code comes back as data and is named in the course's words
(`student_error`). The GradScaler call pattern is lesson 01's check (`helpers.checks.precision`).

One module per exercise: loop (Exercises 1 and 2, check_training), tokens (Exercise 3,
check_token_accumulation) and amp (Exercise 4, AmpAccumulationChecks); and for what several of them
use: reference (the full-batch reference run and the classic mistakes' gradients), updates (a run's
updates against the reference: check_updates), activations (one micro-batch's graph at a time) and
shared (tolerances, the course's words for torch's errors, reading a collector's outcome back). This
package re-exports the names the lesson's test cells call (`checks_accumulation.<name>`), and
check_updates, the check the demo class's hostile notebooks replace through it.

At grading the sandbox stubs every module under helpers/checks/, this package's own __init__
included (a folder rule in course_tools/grading/sandbox_command.py): its references are the
exercises' answers, and the student's kernel never needs them. The lesson's own cells compare
token gradients with `helpers.grads.token_references`, which stays importable.
"""

from helpers.checks.accumulation.amp import AmpAccumulationChecks
from helpers.checks.accumulation.loop import check_cycle_memory, check_training
from helpers.checks.accumulation.reference import reference_run
from helpers.checks.accumulation.tokens import check_token_accumulation, token_references
from helpers.checks.accumulation.updates import check_updates

__all__ = [
    "AmpAccumulationChecks",
    "check_cycle_memory",
    "check_token_accumulation",
    "check_training",
    "check_updates",
    "reference_run",
    "token_references",
]
