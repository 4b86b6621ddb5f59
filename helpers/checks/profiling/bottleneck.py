"""Exercise 2 (find the bottleneck): check_find_bottleneck runs the student's find_bottleneck on phases
that sleep for known times and judges its profiler (the CPU recorded, the schedule, prof.step() once
per step) and the dominant phase and shares against what that same profiler measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from torch.profiler import ProfilerAction

from helpers import grads
from helpers.checks.profiling.shared import _rounded
from helpers.collect.profiling import STEP, Phase, collect_find_bottleneck, phase_spec
from helpers.diagnosis import mistake
from helpers.transport import errors, remote

# Exercise 2: a label's total time is its body's wall time plus microseconds of profiler overhead;
# the phases sleep for milliseconds, so a correct share is within 0.01 of the measured one.
SHARE_ATOL = 0.05


# ----------------------------------------------------------------------------------------------
# Exercise 2: find_bottleneck on phases that sleep for known times
# ----------------------------------------------------------------------------------------------

def _actions(names, steps: int) -> list[ProfilerAction] | None:
    """The schedule's actions for steps 0..steps from the names the collector sent, or None (no
    profiler, or no readable schedule)."""
    if not (isinstance(names, list) and len(names) == steps + 1
            and all(isinstance(name, str) and name in ProfilerAction.__members__ for name in names)):
        return None
    return [ProfilerAction[name] for name in names]


def _schedule_problem(actions: list[ProfilerAction] | None, steps: int) -> tuple[str, str]:
    """What is wrong with the student's schedule for `steps` steps, as (the mistake's name, what to
    say), or ('', '')."""
    if actions is None:
        return "", ""
    recording = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
    if actions[0] in recording:
        return "first_step_profiled", (
            "the first step was measured, so a phase that is slow only in its first call counts its "
            "start-up: skip that step with schedule(wait=0, warmup=1, active=steps - 1, repeat=1)")
    if actions[steps] != ProfilerAction.NONE and actions[steps - 1] == ProfilerAction.RECORD_AND_SAVE:
        return "schedule_repeats_forever", (
            "your schedule starts a new cycle after its active steps (repeat=0, the default, repeats "
            "forever): the profiler hands the finished cycle to on_trace_ready and clears it, so "
            "key_averages() after the loop is empty. Pass repeat=1")
    if [a in recording for a in actions[1:steps]] != [True] * (steps - 1):
        measured = [i for i, a in enumerate(actions[:steps]) if a in recording]
        return "wrong_steps_profiled", (
            f"your schedule measures steps {measured} "
            f"of 0..{steps - 1}: use schedule(wait=0, warmup=1, active=steps - 1, repeat=1)")
    return "", ""


def check_find_bottleneck(find_bottleneck: Callable, plan: Mapping[str, Phase], steps: int) -> tuple:
    """Run find_bottleneck on phases built from `plan` and assert Exercise 2's clauses: a profiler
    that records the CPU, every phase run `steps` times in order, prof.step() once after each step,
    the first step not measured, and
    the dominant phase and each share equal (within SHARE_ATOL) to what the student's own profiler
    measured for steps 2..steps, a phase's time including its nested labels (so a busy machine's
    timing noise cannot fail a right answer). Returns (name, shares)."""
    outcome = remote.run_student(find_bottleneck, collect_find_bottleneck, phase_spec(plan), steps)
    actions = _actions(outcome.get("actions"), steps)
    activities = outcome.get("activities")
    # Before any error: on a machine without CUDA a profiler of CUDA alone raises as it starts.
    if isinstance(activities, list) and "CPU" not in activities:
        recorded = ", ".join(str(activity) for activity in activities) or "no activity"
        raise mistake("cpu_activity_not_recorded",
                      f"find_bottleneck's profiler records {recorded[:80]}, not the CPU: profile with "
                      "activities=[ProfilerActivity.CPU]; the phases run on the CPU, and the shares come "
                      "from their labels' CPU time (cpu_time_total)")
    error = remote.raised_of(outcome)
    if error is not None:
        cause, advice = _schedule_problem(actions, steps)
        raise errors.failure("find_bottleneck", error, advice=advice, cause=cause,
                             expected="returns the slowest phase and every phase's share")
    result = outcome.get("value")
    problem_name, problem = _schedule_problem(actions, steps)
    order = outcome.get("order")
    order = [event for event in order if isinstance(event, str)] if isinstance(order, list) else []
    phase_order = [event for event in order if event != STEP]
    counts = {phase: phase_order.count(phase) for phase in plan}
    if phase_order != list(plan) * steps:
        raise mistake("wrong_phase_runs",
                      f"with steps={steps} every phase should run {steps} times, in the order given; "
                      f"they ran {counts}" + ("" if set(counts.values()) != {steps} else
                                              f", as {', '.join(phase_order[:2 * len(plan)])}, ..."))
    step_calls = order.count(STEP)
    if order != ([*plan, STEP] * steps):
        if step_calls == steps * len(plan):
            raise mistake(
                "prof_step_every_phase",
                f"prof.step() ran {step_calls} times for {steps} steps of {len(plan)} phases: call it once "
                "per training step, after all of the step's phases; the schedule counts prof.step() calls as "
                "steps, so stepping once per phase measures the wrong phases")
        raise mistake("prof_step_misplaced",
                      f"the phases and prof.step() ran as {', '.join(order[:3 * (len(plan) + 1)])}"
                      f", ...: run one step's phases in order, then call prof.step() once "
                      f"({steps} times)")
    shares = result[1] if isinstance(result, tuple) and len(result) == 2 else None
    if not isinstance(shares, Mapping) or set(shares) != set(plan):
        raise mistake(problem_name or "shares_not_per_phase",
                      f"return (name, shares) with one share per phase {list(plan)}, got {result!r}"
                      + (f": {problem}" if problem else ""))
    name, got = result[0], {phase: float(share) for phase, share in shares.items()}
    said = f"your function says {name!r} with shares {_rounded(got)}"
    if problem:
        raise mistake(problem_name, f"{said}: {problem}")
    if not grads.near(sum(got.values()), 1.0, atol=1e-6):
        raise mistake("shares_not_normalised",
                      f"the shares should sum to 1 over the phases, they sum to "
                      f"{sum(got.values()):.6f}")
    totals, self_totals = _profiled_totals(outcome, plan, steps)
    reference = {phase: total / sum(totals.values()) for phase, total in totals.items()}
    off = any(not grads.near(got[p], reference[p], atol=SHARE_ATOL) for p in plan)
    if name != max(reference, key=reference.get) or off:
        cause, diagnosis = _diagnose_bottleneck(said, got, reference, self_totals, plan, steps)
        raise mistake(cause, diagnosis)
    return name, got


def _time_of(row: Mapping, column: str) -> float:
    value = row.get(column)
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise mistake("evidence_unreadable",
                      f"the profiler's table holds {value!r} as a {column}, not a time")
    return float(value)


def _profiled_totals(outcome: Mapping, plan: Mapping[str, Phase], steps: int) -> tuple[dict, dict]:
    """Each phase label's cpu_time_total and self_cpu_time_total in the student's own profiler (its
    table, read by the collector through the class), after checking that it saw every phase once in
    each of steps 2..steps. The shares are compared with what that same profiler measured, so a busy
    machine's timing noise cannot fail a right answer."""
    if outcome.get("profiled") is not True:
        raise mistake("profiler_not_used",
                      "find_bottleneck should profile the steps with torch.profiler.profile(...) "
                      "and read its key_averages()")
    if "table_error" in outcome:
        raise mistake("profile_block_not_ended",
                      f"after find_bottleneck returned, its profiler's key_averages() could not be "
                      f"read ({outcome['table_error']}): let the profile block end before reading it")
    table = outcome.get("table") if isinstance(outcome.get("table"), dict) else {}
    rows = {phase: table[phase] for phase in plan if isinstance(table.get(phase), dict)}
    seen = {phase: rows[phase].get("count") if phase in rows else 0 for phase in plan}
    if set(seen.values()) != {steps - 1}:
        raise mistake("phases_not_labelled",
                      f"the profiler saw the phases {seen} times; with warmup=1 it should see "
                      f"each once in each of steps 2 to {steps} ({steps - 1} times): run every phase "
                      "inside the profile block and label it with record_function(name)")
    totals = {phase: _time_of(rows[phase], "cpu_time_total") for phase in plan}
    if not sum(totals.values()) > 0:
        raise mistake("no_time_in_phases", f"the profiler measured no time in the phases {list(plan)}")
    return totals, {phase: _time_of(rows[phase], "self_cpu_time_total") for phase in plan}


def _diagnose_bottleneck(said, got, reference, self_totals, plan, steps) -> tuple[str, str]:
    """Why the shares differ from the profiler's: (the mistake's name, what to say)."""
    self_reference = {phase: total / sum(self_totals.values()) for phase, total in self_totals.items()}
    nested = [phase for phase, spec in plan.items() if spec.parts]
    if nested and all(grads.near(got[p], self_reference[p], atol=SHARE_ATOL) for p in plan):
        return "self_time_used", (
            f"{said}, but {', '.join(nested)} runs all its work inside nested labels and takes "
            f"{_rounded(reference)}: use each label's total CPU time (cpu_time_total), which includes "
            "everything that runs inside it, not its self time")
    return "shares_not_from_profiler", (
        f"{said}, but your profiler measured {_rounded(reference)} over steps 2 to {steps} (the first is "
        "the warm-up): add each phase label's cpu_time_total from key_averages() and divide by their sum")

