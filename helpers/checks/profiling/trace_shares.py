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

Its references are the exercises' answers and the student's kernel never needs them, so it is
GRADER_ONLY: inside the grading sandbox a stub stands in its place.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerAction
from torch.utils.data import DataLoader

from helpers import grads
from helpers.collect.profiling import (
    EVENT_LETTERS,
    STEP,
    Phase,
    collect_compare_speed,
    collect_fast_epoch,
    collect_find_bottleneck,
    collect_phase_shares_of_a_profiled_loop,
    collect_phase_shares_of_events,
    phase_spec,
)
from helpers.diagnosis import mistake
from helpers.fakes import FakeMachine
from helpers.transport import remote

__all__ = ["Phase", "STEP", "check_compare_speed", "check_fast_epoch", "check_find_bottleneck",
           "check_phase_shares", "check_profiled_trace_shares", "labelled_shares", "reference_epoch",
           "one_after_another", "trace_event"]

# Exercise 1's numbers are exact on the fake clock; an honest float32 computation (a median taken
# with torch) is within a few 1e-8 of them, a wrong one off by far more than this.
RATIO_RTOL = 1e-6
# Exercise 2: a label's total time is its body's wall time plus microseconds of profiler overhead;
# the phases sleep for milliseconds, so a correct share is within 0.01 of the measured one.
SHARE_ATOL = 0.05
# Exercise 3's shares are ratios of whole microseconds.
TRACE_SHARE_ATOL = 1e-6


# ----------------------------------------------------------------------------------------------
# Exercise 1: compare_speed on a fake machine
# ----------------------------------------------------------------------------------------------

def _clock_reads_without_step(events: Sequence[str]) -> bool:
    """Whether two clock reads follow each other with no step in between (a 0 s interval)."""
    last_clock = None
    for index, event in enumerate(events):
        if event == "clock":
            if last_clock is not None and not any(e in ("A", "B") for e in events[last_clock + 1:index]):
                return True
            last_clock = index
    return False


_EVENT_OF_LETTER = {letter: event for event, letter in EVENT_LETTERS.items()}


def _replay(machine: FakeMachine, letters) -> list[tuple[str, float]]:
    """Run on the check's own `machine` the events the collector logged, in their order, and return
    what each step took on the fake clock: [(step name, seconds)]. The machine is deterministic, so
    these are the times the student's code measured, computed here rather than taken from the kernel."""
    if not isinstance(letters, str) or not set(letters) <= _EVENT_OF_LETTER.keys():
        raise mistake("fake_machine_altered",
                      "the fake machine's log holds entries its steps, sync and clock never write: "
                      "call the functions compare_speed is given, and leave their machine alone")
    took = []
    actions = {"A": machine.step_a, "B": machine.step_b, "sync": machine.sync, "clock": machine.clock}
    for letter in letters:
        event = _EVENT_OF_LETTER[letter]
        before = machine.now
        actions[event]()
        if event in ("A", "B"):
            took.append((event, machine.now - before))
    return took


def check_compare_speed(compare_speed: Callable, durations_a: Sequence[float],
                        durations_b: Sequence[float], *,
                        warmup: int, repeats: int, first_call_extra_s: float = 0.0,
                        drift_per_call: float = 0.0) -> dict:
    """Run compare_speed on a FakeMachine (durations in seconds per call, see helpers.fakes) and
    assert every clause of Exercise 1: warm-up, `repeats` interleaved rounds, a sync before every
    clock read, and ratio/low/high equal to the median/min/max of the rounds' time_b / time_a as
    measured on the fake clock (replayed here from the machine's event log). Returns the student's
    dict."""
    def build() -> FakeMachine:
        return FakeMachine(durations_a, durations_b, first_call_extra_s=first_call_extra_s,
                           drift_per_call=drift_per_call)

    outcome = remote.run_student(compare_speed, collect_compare_speed, build(), repeats, warmup)
    error = remote.raised_of(outcome)
    machine = build()
    took = _replay(machine, outcome.get("events"))
    if error is not None and error.type == "ZeroDivisionError" and _clock_reads_without_step(machine.events):
        raise remote.failure("compare_speed", error, cause="clock_read_without_step", advice=(
            "two clock reads had no step between them, so a time came out as 0 s (the test's clock moves "
            "only while a step runs). Read clock() right before and right after each timed call"))
    if error is not None and error.type == "StatisticsError":
        raise remote.failure("compare_speed", error, cause="no_rounds_timed",
                             advice=f"run repeats={repeats} rounds and take the median of their ratios")
    if error is not None:
        raise remote.failure("compare_speed", error, expected="returns the median ratio of B's time to A's")
    event_count = outcome.get("event_count")
    if type(event_count) is int and event_count > len(machine.events):
        raise mistake("too_many_machine_calls",
                      f"compare_speed made {event_count} calls to the steps, sync and clock for "
                      f"warmup={warmup} and repeats={repeats}: warm up, then time {repeats} rounds")
    result = outcome.get("value")
    ran = sum(event in ("A", "B") for event in machine.events)
    if ran and "clock" not in machine.events:
        raise mistake("own_clock_used",
                      f"the steps ran {ran} times, but compare_speed never read the clock it was "
                      "given: time each call with clock() (the test's clock), not time.perf_counter() "
                      "or time.time()")
    warm = machine.warmup_steps()
    extra = f" (here {first_call_extra_s:g} s longer)" if first_call_extra_s else ""
    if warm.count("A") < warmup or warm.count("B") < warmup:
        raise mistake(
            "no_warmup",
            f"before the first clock read {', '.join(warm) if warm else 'no step'} ran, "
            f"with warmup={warmup}: "
            f"warm up both steps, each {warmup} times, or the first, slow call{extra} is timed")
    timed_steps = machine.timed_steps()
    if len(timed_steps) != 2 * repeats:
        raise mistake("wrong_round_count",
                      f"{repeats} rounds should time {repeats} calls of A and {repeats} of B, "
                      f"{len(timed_steps)} calls ran")
    pairs = [timed_steps[i:i + 2] for i in range(0, 2 * repeats, 2)]
    if not all(sorted(pair) == ["A", "B"] for pair in pairs):
        raise mistake("rounds_not_interleaved",
                      f"the timed calls ran as {''.join(timed_steps)}: interleave them, one A and "
                      "one B per round, so that drift in the machine's speed affects both alike")
    unsynced = machine.unsynced_clock_reads()
    if unsynced:
        raise mistake("clock_read_without_sync",
                      f"{unsynced} clock reads did not come right after sync(): on a GPU the clock "
                      "would then measure how fast work is queued, not how long it takes")
    if not isinstance(result, Mapping) or not {"ratio", "low", "high"} <= set(result):
        raise mistake("wrong_return_type", f"return a dict with ratio, low and high, got {result!r}")
    rounds = [dict(took[i:i + 2]) for i in range(len(took) - 2 * repeats, len(took), 2)]
    ratios = [r["B"] / r["A"] for r in rounds]
    median = statistics.median(ratios)
    got = float(result["ratio"])
    if not _close(got, median):
        hint, cause = "", "wrong_ratio"
        if _close(got, statistics.mean(ratios)):
            hint = ": you took the mean, which one slow round drags"
            cause = "mean_not_median"
        elif _close(got, statistics.median(r["B"] for r in rounds)
                    / statistics.median(r["A"] for r in rounds)):
            hint = ": you divided the median times; take the median of each round's ratio instead"
            cause = "ratio_of_medians"
        elif _close(got, statistics.median(r["A"] / r["B"] for r in rounds)):
            hint = (": the ratio is time_b / time_a (below 1 means B is faster), you divided time_a by "
                    "time_b")
            cause = "ratio_inverted"
        raise mistake(cause,
                      f"ratio is {got:.9g}, but the median of the rounds' time_b / time_a is "
                      f"{median:.9g}{hint}")
    low, high = float(result["low"]), float(result["high"])
    if not (_close(low, min(ratios)) and _close(high, max(ratios))):
        raise mistake("wrong_low_high",
                      f"low and high should be the smallest and largest ratios ({min(ratios):.9g} and "
                      f"{max(ratios):.9g}), got {low:.9g} and {high:.9g}")
    return dict(result)


def _close(value: float, reference: float) -> bool:
    return grads.near(value, reference, rtol=RATIO_RTOL, atol=1e-12)


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
        raise remote.failure("find_bottleneck", error, advice=advice, cause=cause,
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


def _rounded(shares: Mapping[str, float]) -> dict[str, float]:
    return {phase: round(share, 3) for phase, share in shares.items()}


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


# ----------------------------------------------------------------------------------------------
# Exercise 3: phase_shares on traces the test writes
# ----------------------------------------------------------------------------------------------

def trace_event(name: str, dur: float | None, cat: str = "user_annotation", ph: str = "X", *,
                ts: float = 0, tid: int = 1) -> dict:
    """One Chrome-trace event as the profiler writes it (`ts` and `dur` in microseconds; None: no
    dur), on thread `tid` of process 1."""
    event = {"name": name, "cat": cat, "ph": ph, "ts": ts, "pid": 1, "tid": tid}
    if dur is not None:
        event["dur"] = dur
    return event


def one_after_another(events: list[dict]) -> list[dict]:
    """The events with their `ts` set so that each starts where the one before ended (an event
    without `dur` takes no time): a trace with no label inside another."""
    clock = 0
    for event in events:
        event["ts"] = clock
        clock += event.get("dur", 0) or 0
    return events


def _outermost(events: list[dict], phases, per_thread: bool = True) -> list[dict]:
    """The complete user_annotation events named after a phase that no other such event encloses on
    the same thread (a label inside another is already in that one's time). per_thread=False
    decides nesting across the whole trace instead, as if every label ran on one thread: a mistake,
    which the check works out to recognise it."""
    labels = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"
              and e.get("cat") == "user_annotation" and e.get("name") in phases
              and isinstance(e.get("dur"), int | float) and isinstance(e.get("ts"), int | float)]

    def thread_of(event: dict) -> tuple[str, str]:
        return (str(event.get("pid")), str(event.get("tid"))) if per_thread else ("", "")

    labels.sort(key=lambda e: (*thread_of(e), e["ts"], -e["dur"]))
    kept, open_until = [], {}
    for event in labels:
        thread, end = thread_of(event), event["ts"] + event["dur"]
        if thread in open_until and end <= open_until[thread]:
            continue
        kept.append(event)
        open_until[thread] = end
    return kept


def _shares_of(outcome: Mapping, as_str: bool):
    """What phase_shares returned, from a collector's outcome. A ValueError it raised is raised
    again as a ValueError (the lesson's answer to a trace without the phases: the callers decide),
    NotImplementedError too; any other error becomes a failure in the course's words."""
    error = remote.raised_of(outcome)
    if error is None:
        return outcome.get("value")
    if outcome.get("value_error") is True or error.type == "ValueError":
        raise ValueError(error.message)
    advice, cause = "", ""
    if error.type == "KeyError" and error.message == "'dur'":
        advice = "instant events (\"ph\": \"i\") have no duration; add only complete events (\"ph\": \"X\")"
        cause = "instant_events_added"
    elif error.type == "AttributeError" and as_str and "'str' object" in error.message:
        advice = "trace_path may be a str: open it as Path(trace_path)"
        cause = "trace_path_str_not_handled"
    raise remote.failure("phase_shares", error, advice=advice, cause=cause,
                         expected="returns each phase's share of the labelled time")


def _shares_of_events(phase_shares: Callable, trace_path, events: list[dict], phases: Sequence[str]):
    """phase_shares on a trace of `events`, written where the student's function runs under
    trace_path's file name (trace_path is a folder of this process, which a kernel cannot see),
    and passed as a str when trace_path is one."""
    as_str = isinstance(trace_path, str)
    outcome = remote.run_student(phase_shares, collect_phase_shares_of_events, events, Path(trace_path).name,
                                 as_str, list(phases))
    return _shares_of(outcome, as_str)


def check_phase_shares(phase_shares: Callable, trace_path: Path, events: list[dict],
                       want: Mapping[str, float], gpu_counted: Mapping[str, float] | None = None,
                       nested_counted: Mapping[str, float] | None = None) -> dict:
    """Write `events` as a Chrome trace at trace_path (and where the student's function runs, see
    _shares_of_events), run phase_shares(that trace, list(want)) and assert Exercise 3: one share per
    phase equal to `want` (worked out by the test from the events it wrote; when the result equals
    `gpu_counted`, say that the gpu_user_annotation copies were added; `nested_counted`, that labels
    inside other labels were added again), then that asking for a phase the trace lacks raises
    ValueError."""
    Path(trace_path).write_text(json.dumps({"traceEvents": events}))
    try:
        got = _shares_of_events(phase_shares, trace_path, events, list(want))
    except ValueError as error:
        raise mistake("value_error_with_phases_present",
                      f"phase_shares raised ValueError ({error}) on a trace that holds the phases "
                      f"{[p for p, share in want.items() if share]}") from None
    if not isinstance(got, Mapping) or set(got) != set(want):
        raise mistake("shares_not_per_phase",
                      f"return one share per phase asked for {list(want)}, got {got!r}")
    if gpu_counted and all(grads.near(float(got[p]), gpu_counted[p], atol=TRACE_SHARE_ATOL) for p in want):
        raise mistake("gpu_annotations_counted",
                      f"your shares {_rounded(got)} count each label twice: GPU-side copies of the "
                      "labels (cat gpu_user_annotation) must not be added, only cat == "
                      "'user_annotation'")
    if nested_counted and all(grads.near(float(got[p]), nested_counted[p], atol=TRACE_SHARE_ATOL)
                              for p in want):
        raise mistake("nested_labels_counted",
                      f"your shares {_rounded(got)} count a label twice when it runs inside another "
                      "label of the phases: its time is already in the outer one's, so add only the "
                      "labels that no other one encloses (same pid and tid, within its ts and "
                      "ts + dur)")
    off = [phase for phase, share in want.items()
           if not grads.near(float(got[phase]), share, atol=TRACE_SHARE_ATOL)]
    across = _shares_nested_across_threads(events, want)
    if off and across and all(grads.near(float(got[p]), across[p], atol=TRACE_SHARE_ATOL) for p in want):
        raise mistake("nesting_across_threads",
                      "labels nest only on the same pid and tid: a label on another thread that overlaps "
                      "in time is not inside it, and both count. Your shares "
                      f"{_rounded(got)} leave such a label out, the right ones are {_rounded(want)}: "
                      "decide which label encloses which separately for each (pid, tid)")
    for phase, share in want.items():
        if not grads.near(float(got[phase]), share, atol=TRACE_SHARE_ATOL):
            raise mistake(
                "wrong_shares",
                f"{phase}'s share should be {share:.8f}, got {float(got[phase]):.8f}: add the durations of "
                "its complete (\"ph\": \"X\") user_annotation events that no other label of the phases "
                "encloses, and divide by the sum over the phases")
    _check_none_raises(phase_shares, trace_path, events)
    return {phase: float(share) for phase, share in got.items()}


def _shares_nested_across_threads(events: list[dict], want: Mapping[str, float]) -> dict[str, float] | None:
    """The shares a function gets when it decides nesting across the whole trace instead of per
    (pid, tid), if they differ from `want` (the trace has labels on two threads that overlap), else
    None."""
    totals = dict.fromkeys(want, 0.0)
    for event in _outermost(events, totals, per_thread=False):
        totals[event["name"]] += float(event["dur"])
    whole = sum(totals.values())
    if not whole > 0:
        return None
    across = {phase: total / whole for phase, total in totals.items()}
    if all(grads.near(across[p], want[p], atol=TRACE_SHARE_ATOL) for p in want):
        return None
    return across


def _check_none_raises(phase_shares: Callable, trace_path, events: list[dict]) -> None:
    try:
        _shares_of_events(phase_shares, trace_path, events, ["no_such_phase"])
    except ValueError:
        return
    except AssertionError as problem:
        if "stopped with ZeroDivisionError" in str(problem):
            said = str(problem).split(";")[0]
            raise mistake("no_value_error_for_missing_phases",
                          f"when none of the phases occurs, {said}; check the summed duration and "
                          "raise ValueError") from None
        raise
    raise mistake("no_value_error_for_missing_phases",
                  "phase_shares should raise ValueError when none of the phases occurs in the trace")


def labelled_shares(events, phases: Sequence[str]) -> dict[str, float]:
    """Exercise 3's answer, worked out by the check: each phase's share of the summed durations of
    the complete ("ph": "X") user_annotation events named after the phases that no other of them
    encloses on the same thread."""
    totals = dict.fromkeys(phases, 0.0)
    for event in _outermost(events if isinstance(events, list) else [], totals):
        totals[event["name"]] += float(event["dur"])
    whole = sum(totals.values())
    if not whole > 0:
        raise mistake("evidence_unreadable",
                      f"the profiler's trace held no labelled time for {list(phases)}: run the test "
                      "again")
    return {phase: total / whole for phase, total in totals.items()}


def check_profiled_trace_shares(phase_shares: Callable, phases: Sequence[str]) -> dict:
    """Run phase_shares on a real trace, passed as a str: a small training loop profiled where the
    student's function runs, each phase labelled (helpers.collect.profiling.profiled_loop_events).
    Assert the shares this check works out from that trace's events."""
    outcome = remote.run_student(phase_shares, collect_phase_shares_of_a_profiled_loop, list(phases))
    try:
        got = _shares_of(outcome, as_str=True)
    except ValueError as error:
        raise mistake("value_error_with_phases_present",
                      f"phase_shares raised ValueError ({error}) on the profiler's trace of a small "
                      f"training loop, which holds the phases {list(phases)}") from None
    want = labelled_shares(outcome.get("events"), phases)
    if not isinstance(got, Mapping) or set(got) != set(phases):
        raise mistake("shares_not_per_phase",
                      f"on the profiler's trace of a small training loop, return one share per phase "
                      f"asked for {list(phases)}, got {got!r}")
    for phase, share in want.items():
        if not grads.near(float(got[phase]), share, atol=TRACE_SHARE_ATOL):
            raise mistake(
                "wrong_shares",
                f"on the profiler's trace of a small training loop, {phase}'s share should be {share:.8f}, "
                f"got {float(got[phase]):.8f}: add the durations (microseconds, with fractions) of the "
                "complete user_annotation events named after the phases and divide by their sum; a real "
                "trace also holds operators (cat cpu_op) and step labels (ProfilerStep#...)")
    return {phase: float(share) for phase, share in got.items()}


# ----------------------------------------------------------------------------------------------
# Exercise 4: fast_epoch against slow_epoch
# ----------------------------------------------------------------------------------------------

def reference_epoch(model: torch.nn.Module, dataset, batch_size: int, lr: float) -> float:
    """The notebook's slow_epoch as the lesson publishes it, with SGD(lr), on `model` (trained in
    place): same batches, same order, same updates. The check runs this, never the notebook's
    slow_epoch, which sits in a cell the student can edit. Returns the mean loss."""
    model_device = next(model.parameters()).device
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(dataset, batch_size=batch_size)
    total = 0.0
    for x, y in loader:
        x, y = x.to(model_device), y.to(model_device)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total / len(loader)


def _dicts(value) -> list[dict]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _count(value) -> int:
    return value if type(value) is int and value >= 0 else 0


def _parameters_of(outcome: Mapping, like: Mapping[str, torch.Tensor]) -> dict | None:
    """The parameters the collector sent, if they are `like`'s names and shapes, else None."""
    sent = outcome.get("parameters")
    if not (isinstance(sent, dict) and sent.keys() == like.keys()):
        return None
    if not all(isinstance(sent[name], torch.Tensor) and sent[name].shape == tensor.shape
               for name, tensor in like.items()):
        return None
    return sent


def check_fast_epoch(fast_epoch: Callable, dataset, model: torch.nn.Module, *,
                     batch_size: int, num_workers: int, log_every: int, lr: float = 0.05) -> str:
    """Run fast_epoch on a copy of `model` (SGD, lr) and assert Exercise 4: first the outcome,
    slow_epoch's final parameters and mean loss (a float; a wrong outcome is explained by the
    DataLoader's batch_size, shuffle, drop_last and batches), then what only counting shows: a
    DataLoader with the given num_workers (pin_memory on CUDA), host syncs only every log_every
    steps and at the end, no graph in what is read, batches moved with non_blocking=True.
    slow_epoch's outcome comes from reference_epoch, the lesson's slow_epoch as published, run here
    on another copy: never the notebook's, which sits in a cell the student can edit. Returns a
    one-line summary."""
    twin = grads.clone_model(model)
    reference_loss = reference_epoch(twin, dataset, batch_size, lr)
    steps = -(-len(dataset) // batch_size)
    model_device = _device_of(model)
    outcome = remote.run_student(fast_epoch, collect_fast_epoch, model, next(model.parameters()).device, lr,
                                 dataset, batch_size, num_workers, log_every)
    error = remote.raised_of(outcome)
    if error is not None:
        raise remote.failure("fast_epoch", error,
                             expected="trains as slow_epoch does and returns its mean loss")
    loaders = outcome.get("loaders") if isinstance(outcome.get("loaders"), dict) else {}
    all_settings, batches = _dicts(loaders.get("settings")), _count(loaders.get("batches"))
    # The outcome first: the parameters and the loss slow_epoch reaches. What the spies recorded
    # (the DataLoaders, the host syncs) explains a wrong outcome, or enforces what no outcome shows.
    reference = {name: tensor.cpu() for name, tensor in grads.param_snapshot(twin).items()}
    ended = _parameters_of(outcome, reference)
    params = None if ended is None else grads.compare(ended, reference)
    if params is None or not params.close(rtol=1e-5, atol=1e-6):
        for settings in all_settings:
            if settings.get("batch_size") != batch_size:
                raise mistake("batch_size_not_passed",
                              f"the DataLoader ran with batch_size={settings.get('batch_size')}: pass "
                              f"batch_size={batch_size} on")
        if any(settings.get("shuffle") is True for settings in all_settings):
            raise mistake("shuffled_batches",
                          "the DataLoader shuffled (shuffle=True): slow_epoch takes the batches in the "
                          "dataset's order, so yours held other samples, in another order, and the model "
                          "ended elsewhere than slow_epoch's: leave shuffle off (False, the default)")
        if any(settings.get("drop_last") is True for settings in all_settings):
            raise mistake("dropped_last_batch",
                          f"the DataLoader dropped the last, shorter batch (drop_last=True): slow_epoch "
                          f"trains on it too ({steps} steps for {len(dataset)} samples in batches of "
                          f"{batch_size}): leave drop_last off (False, the default)")
        if all_settings and batches != steps:
            raise mistake("not_every_batch_trained",
                          f"fast_epoch took {batches} batches from its DataLoader for {steps} "
                          "steps: train on every batch the DataLoader yields, once")
        how = f" ({params})" if params else ""
        raise mistake("wrong_final_parameters",
                      f"the model ended elsewhere than slow_epoch's{how}: same batches, same order, "
                      "same updates")
    if "value" not in outcome:
        raise mistake("loss_not_python_float",
                      "return the mean loss as a Python float (read the total with .item() at the "
                      f"end), not a {outcome.get('returned')}")
    loss = outcome["value"]
    if not grads.near(loss, reference_loss, atol=1e-4 * max(1.0, abs(reference_loss))):
        raise mistake("wrong_loss_returned",
                      f"returned {loss:.6f}, slow_epoch returns {reference_loss:.6f}: the mean of the "
                      f"{steps} batches' losses (the last batch is shorter when the dataset does not "
                      "divide evenly)")
    # Required by the text, and visible in no outcome: counted.
    if not all_settings:
        raise mistake("no_dataloader", "fast_epoch should load the data with a torch.utils.data.DataLoader")
    for settings in all_settings:
        if settings.get("num_workers") != num_workers:
            raise mistake(
                "num_workers_not_passed",
                f"the DataLoader ran with num_workers={settings.get('num_workers')}: pass num_workers on, so "
                f"that worker processes (here {num_workers}) decode the next batches while the model trains")
        if model_device.type == "cuda" and not settings.get("pin_memory"):
            raise mistake("pin_memory_off_on_cuda",
                          "the model is on CUDA but the DataLoader ran with pin_memory=False: pinned "
                          "batches copy to the GPU with .to(device, non_blocking=True) without a stop")
        if model_device.type != "cuda" and settings.get("pin_memory"):
            raise mistake("pin_memory_without_cuda",
                          f"the model is on {model_device.type} but the DataLoader ran with "
                          "pin_memory=True: pinning helps only a copy to a GPU; pass "
                          "pin_memory=(the model's device is CUDA)")
    syncs = outcome.get("syncs") if isinstance(outcome.get("syncs"), dict) else {}
    counts = syncs.get("counts") if isinstance(syncs.get("counts"), dict) else {}
    counts = {str(name): _count(count) for name, count in counts.items()}
    total_syncs = sum(counts.values())
    # The text allows a read per log and one at the end; when the last step also logs, one read can
    # serve both, so one fewer is right too.
    reads = steps // log_every + 1
    fewest = reads - (steps % log_every == 0)
    if total_syncs > reads:
        raise mistake(
            "too_many_host_reads",
            f"fast_epoch made {total_syncs} host syncs ({_nonzero(counts)}) for {steps} steps with "
            f"log_every={log_every}: keep the running loss on the device (total += loss.detach()) and "
            f"read it only every log_every steps and at the end ({reads} reads)")
    if total_syncs < fewest:
        raise mistake(
            "loss_not_logged",
            f"fast_epoch read the loss {total_syncs} times in {steps} steps with log_every={log_every}: "
            f"print the running mean every log_every steps ({steps // log_every} times) and read it once "
            "at the end")
    if _count(syncs.get("reads_with_graph")):
        raise mistake("total_keeps_graph",
                      "the running total you read still carries the autograd graph: total += loss "
                      "keeps every step's graph alive (the PyTorch FAQ's memory leak); add "
                      "loss.detach()")
    blocking = _count(syncs.get("blocking_batch_copies"))
    if blocking:
        raise mistake("blocking_copies",
                      f"{blocking} of the {max(blocking, _count(syncs.get('batch_copies')))} copies of "
                      "a batch to the model's device ran without non_blocking=True: move each batch "
                      "with .to(device, non_blocking=True), so that a copy from pinned memory does not "
                      "stop the host while it runs")
    return f"{steps} steps, {total_syncs} host syncs, num_workers={num_workers}"


def _device_of(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter (a seam: unit tests stand in a CUDA device)."""
    return next(model.parameters()).device


def _nonzero(counts: Mapping[str, int]) -> dict[str, int]:
    return {name: count for name, count in counts.items() if count}
