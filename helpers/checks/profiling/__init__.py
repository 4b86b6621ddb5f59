"""Checks for the profiling lesson (03): each runs the student's function on a scenario whose answer
the check knows by construction (a fake clock, phases that sleep for known times, a trace the test
writes, a reference training run), and names the classic mistake it sees.

Each check chooses the inputs, has the student's function run on them by its collector in
helpers.collect.profiling (through helpers.transport.remote: in the same process in the student's notebook,
in the sandboxed kernel at grading) and judges here what came back: it replays the fake machine's
event log on its own machine, reads the student's profiler's table as data, and trains the
reference epoch itself. What only the student's process can observe (host syncs, DataLoader
settings, the order of calls) can cost points, never earn them. An error the student's code raised
becomes an AssertionError in the course's words; NotImplementedError (the unanswered stub) passes
through unchanged.

One module per exercise: speed_comparison (1, compare_speed on a fake machine), bottleneck (2,
find_bottleneck on phases that sleep for known times), trace_shares (3, phase_shares on traces),
slow_loop (4, fast_epoch against slow_epoch), and shared for what several of them use. This package
re-exports what the lesson's test cells call.

Its references are the exercises' answers and the student's kernel never needs them: inside the
grading sandbox a stub stands in for every module under helpers/checks/ (a folder rule in
course_tools/grading/sandbox_command.py).
"""

from helpers.checks.profiling.bottleneck import check_find_bottleneck
from helpers.checks.profiling.slow_loop import check_fast_epoch
from helpers.checks.profiling.speed_comparison import check_compare_speed
from helpers.checks.profiling.trace_shares import (
    check_phase_shares,
    check_profiled_trace_shares,
    one_after_another,
    trace_event,
)
from helpers.collect.profiling import Phase

__all__ = ["Phase", "check_compare_speed", "check_fast_epoch", "check_find_bottleneck", "check_phase_shares",
           "check_profiled_trace_shares", "one_after_another", "trace_event"]
