"""Exercise 3 (time shares from a trace): check_phase_shares runs the student's phase_shares on Chrome
traces the test writes, check_profiled_trace_shares on a real profiler's trace, and both judge each
phase's share against labelled_shares, worked out here from the trace's events (complete
user_annotation labels that no other encloses on the same thread).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from helpers import grads
from helpers.checks.profiling.shared import _rounded
from helpers.collect.profiling import collect_phase_shares_of_a_profiled_loop, collect_phase_shares_of_events
from helpers.diagnosis import mistake
from helpers.transport import errors, remote

# Exercise 3's shares are ratios of whole microseconds.
TRACE_SHARE_ATOL = 1e-6


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
    raise errors.failure("phase_shares", error, advice=advice, cause=cause,
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

