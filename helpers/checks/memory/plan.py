"""Exercise 4 of lesson 04: a plan (micro-batch, accumulation steps, checkpointing) that fits a budget.

check_plan and check_plan_raises run the student's plan_micro_batches with a PeakMeasure of the model,
measure each plan's peak here (once per micro-batch and checkpointing) and judge the plan against the
largest micro-batch that fits, or the ValueError when nothing fits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from torch import nn

from helpers.collect.memory import PeakMeasure, collect_plan, known_peaks
from helpers.diagnosis import mistake
from helpers.transport import errors, remote

PLAN_KEYS = ("micro_batch", "accum_steps", "checkpointing")


# ---------------------------------------------------------------- Exercise 4: a plan that fits

def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _odd_sizes(calls: list) -> list:
    return sorted({m for m, *_ in calls if isinstance(m, bool) or not isinstance(m, int) or m < 1}, key=repr)


class _PeakTable:
    """The grader's own measure of one model (measured once per structure in this process:
    helpers.collect.memory.micro_batch_peak), and the best plan it allows."""

    def __init__(self, model: nn.Module):
        self.model = model
        self._measure = PeakMeasure(model)

    def __call__(self, micro_batch: int, checkpointing: bool) -> int:
        return self._measure.bytes(micro_batch, bool(checkpointing))

    def best_plan(self, effective_batch: int, budget: int) -> tuple[int, bool] | None:
        """The largest divisor that fits, without checkpointing where it fits both ways; None if
        nothing fits."""
        for micro_batch in reversed(_divisors(effective_batch)):
            for checkpointing in (False, True):
                if self(micro_batch, checkpointing) <= budget:
                    return micro_batch, checkpointing
        return None

    def student_measure(self) -> PeakMeasure:
        """What the student's plan gets: a measure of the same model that already knows the peaks
        measured here (best_plan has measured what a correct plan asks), so the kernel does not
        measure them again."""
        return PeakMeasure(self.model, known=known_peaks(self.model))


def _call_planner(plan: Callable, effective_batch: int, budget: int,
                  table: _PeakTable) -> tuple[object, list]:
    outcome = remote.run_student(plan, collect_plan, effective_batch, budget, table.student_measure())
    calls = [call for call in outcome.get("calls", []) if isinstance(call, (list, tuple)) and call]
    error = remote.raised_of(outcome)
    if error is None:
        return outcome["value"], calls
    if error.type == "ValueError":
        best = table.best_plan(effective_batch, budget)
        if best is not None:
            m, c = best
            raise mistake(
                "value_error_though_plan_fits",
                f"plan_micro_batches raised ValueError ({error.message}), but a plan fits: micro-batch {m} "
                f"{'with' if c else 'without'} checkpointing peaks at {table(m, c)} bytes, within the "
                f"budget of {budget}")
        raise ValueError(error.message)
    hint, cause = "", ""
    if error.type == "ZeroDivisionError" and _odd_sizes(calls):
        hint = (f"you tried micro-batches of {_odd_sizes(calls)}; micro-batches are the divisors of "
                "effective_batch, from 1 up")
        cause = "invalid_micro_batch_size"
    elif (error.type == "TypeError" and "positional argument" in error.message
          and "checkpointing" in error.message):
        hint = "call measure(micro_batch, checkpointing) with both arguments"
        cause = "measure_missing_argument"
    raise errors.failure("plan_micro_batches", error, advice=hint, cause=cause,
                         expected="returns the plan with the largest micro-batch that fits the budget")


def check_plan(plan: Callable, model: nn.Module, effective_batch: int, budget: int) -> dict:
    """plan(effective_batch, budget, measure) must keep the effective batch, fit the budget as
    measured, take the largest micro-batch that fits with or without checkpointing, and checkpoint
    only when that micro-batch does not fit without it."""
    table = _PeakTable(model)
    best = table.best_plan(effective_batch, budget)
    result, calls = _call_planner(plan, effective_batch, budget, table)
    if not (isinstance(result, Mapping) and all(key in result for key in PLAN_KEYS)):
        raise mistake(
            "wrong_return_type",
            f"plan_micro_batches should return a dict with the keys {list(PLAN_KEYS)}, got {result!r}")
    m, k, c = (result[key] for key in PLAN_KEYS)
    odd = _odd_sizes(calls)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (m, k)):
        raise mistake(
            "plan_sizes_not_ints",
            f"micro_batch and accum_steps should be whole numbers (int), got {m!r} and {k!r}"
            + (": use effective_batch // micro_batch" if isinstance(k, float) else ""))
    if not (m >= 1):
        raise mistake(
            "invalid_micro_batch_size",
            f"micro_batch is {m}{f' (you tried {odd})' if odd else ''}: micro-batches run from 1 up")
    if not (m * k == effective_batch):
        raise mistake(
            "effective_batch_changed",
            f"micro_batch {m} x accum_steps {k} = {m * k}, but the effective batch is {effective_batch}: "
            "fit the budget with more accumulation steps, never by shrinking the effective batch")
    if type(c) is not bool:
        raise mistake(
            "checkpointing_not_bool",
            f"checkpointing should be a bool, True or False, got {c!r} ({type(c).__name__}): the plan is "
            "two ints and a bool")
    used = table(m, c)
    if not (used <= budget):
        raise mistake(
            "budget_exceeded",
            f"the plan {dict(result)} peaks at {used} bytes over forward and backward, over the budget "
            f"of {budget}")
    measured = [list(call) for call in calls]
    # Measured without checkpointing and turned down at exactly the budget: the comparison was `<`.
    # A plan that tried checkpointing first never saw that peak: its mistake is the preference.
    if c and table(m, False) == budget and [m, False] in measured:
        raise mistake(
            "budget_boundary_excluded",
            f"{dict(result)} uses checkpointing, but micro-batch {m} fits without it: its plain peak "
            f"({table(m, False)} bytes) is exactly the budget of {budget}, and a plan fits when "
            "measure(m, c) <= budget_bytes, the budget itself included")
    if c and not (table(m, False) > budget):
        raise mistake(
            "needless_checkpointing",
            f"{dict(result)} uses checkpointing, but micro-batch {m} fits without it "
            f"({table(m, False)} bytes): checkpointing costs an extra forward")
    best_m, best_c = best
    # Measured and turned down although its peak equals the budget: the comparison was `<`.
    exactly = table(best_m, best_c) == budget and [best_m, best_c] in measured
    if not (m >= best_m):
        raise mistake(
            "budget_boundary_excluded" if exactly else "plan_not_largest",
            f"{dict(result)}: micro-batch {best_m} also fits {'with' if best_c else 'without'} checkpointing "
            f"({table(best_m, best_c)} bytes)" + (
                f", exactly the budget of {budget}: a plan fits when measure(m, c) <= budget_bytes, the "
                "budget itself included" if exactly else "; take the largest micro-batch that fits"
                + (", checkpointing when that is what lets it fit" if best_c and not c else "")))
    return dict(result)


def check_plan_raises(plan: Callable, model: nn.Module, effective_batch: int, budget: int) -> None:
    """With a budget no micro-batch fits, with or without checkpointing, plan(...) must raise ValueError."""
    table = _PeakTable(model)
    assert table.best_plan(effective_batch, budget) is None, f"the test's budget of {budget} bytes fits"
    outcome = remote.run_student(plan, collect_plan, effective_batch, budget, table.student_measure())
    error = remote.raised_of(outcome)
    if error is not None and error.type == "ValueError":
        return
    if error is not None:
        raise mistake("no_value_error_when_nothing_fits",
                      f"with a budget of {budget} bytes nothing fits: raise ValueError, not "
                      f"{error.type} ({error.message})")
    raise mistake("no_value_error_when_nothing_fits",
                  f"with a budget of {budget} bytes nothing fits: raise ValueError "
                  f"(your function returned {outcome['value']!r})")
