"""Exercise 1 (an honest comparison): check_compare_speed runs the student's compare_speed on a fake
machine whose steps take known times, replays the machine's event log here, and judges the warm-up,
the interleaved rounds, the syncs before the clock reads, and the median ratio with its low and high.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence

from helpers import grads
from helpers.collect.profiling import EVENT_LETTERS, collect_compare_speed
from helpers.diagnosis import mistake
from helpers.fakes import FakeMachine
from helpers.transport import errors, remote

# Exercise 1's numbers are exact on the fake clock; an honest float32 computation (a median taken
# with torch) is within a few 1e-8 of them, a wrong one off by far more than this.
RATIO_RTOL = 1e-6


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
        raise errors.failure("compare_speed", error, cause="clock_read_without_step", advice=(
            "two clock reads had no step between them, so a time came out as 0 s (the test's clock moves "
            "only while a step runs). Read clock() right before and right after each timed call"))
    if error is not None and error.type == "StatisticsError":
        raise errors.failure("compare_speed", error, cause="no_rounds_timed",
                             advice=f"run repeats={repeats} rounds and take the median of their ratios")
    if error is not None:
        raise errors.failure("compare_speed", error, expected="returns the median ratio of B's time to A's")
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
