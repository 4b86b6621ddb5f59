"""The updates a recorded run made, against the reference's (Exercises 1, 2 and 4): the backward and step
counts, each step's gradient (named after the classic mistake it matches, or old gradients leaking
in), the final parameters and the returned losses."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

from helpers.checks.accumulation.activations import check_activation_memory
from helpers.checks.accumulation.reference import CycleReference, Reference
from helpers.checks.accumulation.shared import ATOL, RTOL
from helpers.diagnosis import mistake
from helpers.grads import GradDict, compare, near

MISTAKE_MESSAGES = {
    "no_division": (
        "the gradient at update {update} is the plain sum of the micro-batch gradients, {n}x too large: "
        "divide each micro-batch loss by the number of micro-batches in the cycle (accum_steps)"
    ),
    "last_micro_batch_only": (
        "the gradient at update {update} holds only the last micro-batch: zero_grad() ran inside the "
        "cycle and wiped the earlier micro-batches. Call zero_grad() once, at the start of a cycle"
    ),
    "divided_by_accum_steps": (
        "update {update} divided its micro-batch losses by accum_steps={k}, but its cycle has "
        "{n} micro-batches: weight each micro-batch by its share of the samples in its own cycle"
    ),
    "equal_weights": (
        "update {update} weighted every micro-batch equally, but they hold different numbers of "
        "samples: weight each micro-batch's mean loss by its share of the samples in the cycle"
    ),
    "clipped_every_micro_batch": (
        "the gradient at update {update} was clipped after every micro-batch: clip once per "
        "cycle, after the last backward (and after scaler.unscale_)"
    ),
    "not_clipped": (
        "the gradient at update {update} was never clipped: call "
        "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) once per cycle, before step"
    ),
}
MISTAKE_MESSAGES["last_micro_batch_only_undivided"] = MISTAKE_MESSAGES["last_micro_batch_only"]
# The name each of those mistakes goes by in a class report (helpers.diagnosis.mistake).
MISTAKE_NAMES = {
    "no_division": "loss_not_divided",
    "last_micro_batch_only": "zero_grad_inside_cycle",
    "last_micro_batch_only_undivided": "zero_grad_inside_cycle",
    "divided_by_accum_steps": "short_cycle_divided_by_accum_steps",
    "equal_weights": "micro_batches_weighted_equally",
    "clipped_every_micro_batch": "clipped_every_micro_batch",
    "not_clipped": "not_clipped",
}


STALE_MESSAGE = (
    "the gradient at update {update} still holds the gradients that were in .grad before your "
    "function was called: clear them before the first backward, with zero_grad at the start of "
    "every cycle (or once before the loop as well as after every step)"
)


def _matches_cycle(candidate: GradDict, cycle: CycleReference) -> bool:
    """True if `candidate` is the cycle's gradient or the gradient of one of its classic mistakes."""
    return any(compare(candidate, grads).close(rtol=RTOL, atol=ATOL)
               for grads in (cycle.grads, *cycle.mistakes.values()))


def diagnose_gradient(candidate: GradDict, cycle: CycleReference, update: int, cycle_size: int,
                      accum_steps: int, stale: GradDict | None = None) -> str | None:
    """None if `candidate` matches the cycle's full-batch gradient, else a message naming the mistake.

    `stale`: the gradients .grad held before the student's function ran (only for the first
    update); a candidate that is those plus a cycle's gradient is named as leaked old gradients.
    """
    diagnosis = _gradient_diagnosis(candidate, cycle, update, cycle_size, accum_steps, stale)
    return None if diagnosis is None else diagnosis[1]


def _gradient_diagnosis(candidate: GradDict, cycle: CycleReference, update: int, cycle_size: int,
                        accum_steps: int, stale: GradDict | None = None) -> tuple[str, str] | None:
    """diagnose_gradient's message, with the name of the mistake it names: (name, message), or None."""
    missing = [name for name, g in candidate.items() if g is None]
    if missing:
        return "backward_missing", (f"at update {update} the parameters {missing[:3]} had no gradient: "
                                    "run loss.backward() for every micro-batch before optimizer.step()")
    result = compare(candidate, cycle.grads)
    if result.close(rtol=RTOL, atol=ATOL):
        return None
    if stale is not None and all(stale.get(name) is not None for name in candidate):
        without = {name: g - stale[name] for name, g in candidate.items()}
        if _matches_cycle(without, cycle):
            return "stale_grads_not_cleared", STALE_MESSAGE.format(update=update)
    for kind, grads in cycle.mistakes.items():
        if compare(candidate, grads).close(rtol=RTOL, atol=ATOL):
            return MISTAKE_NAMES[kind], MISTAKE_MESSAGES[kind].format(update=update, k=accum_steps,
                                                                     n=cycle_size)
    ratio = _scale_of(candidate, cycle.grads)
    if ratio is not None and ratio > 0 and not near(ratio, 1.0, rtol=0.02) and compare(
            candidate, {name: g * ratio for name, g in cycle.grads.items()}).close(rtol=RTOL, atol=ATOL):
        return "cycle_weights_not_one", (
            f"the gradient at update {update} points the right way but is {ratio:.3g} times the "
            f"full-batch gradient of its cycle of {cycle_size} micro-batches: the weights of this "
            "cycle's micro-batch losses add up to that, not 1. Weigh each micro-batch by its share "
            "of the samples of its own cycle, counted anew for every cycle, the short last one included")
    return "wrong_gradient", (
        f"the gradient at update {update} differs from the full-batch gradient of its cycle "
        f"({result}): it should be the gradient of the mean loss over all samples of the cycle")


def _scale_of(candidate: GradDict, reference: GradDict) -> float | None:
    """The factor s that makes s * reference closest to candidate (least squares), or None."""
    dot = norm = 0.0
    for name, want in reference.items():
        got = candidate.get(name)
        if want is None or got is None or got.shape != want.shape:
            return None
        dot += float((got.double() * want.double()).sum())
        norm += float((want.double() ** 2).sum())
    return dot / norm if norm > 0 else None


_NOT_GIVEN = object()


def check_updates(log, reference: Reference,
                  returned_losses: Sequence[float] | None = _NOT_GIVEN, *,
                  final_params: GradDict | None = None, stale_grads: GradDict | None = None,
                  activation_peaks: tuple | None = None, memory_judged_outside: bool = False) -> None:
    """Assert that a recorded run made the reference's updates; the message names the first mistake.

    `log` is a helpers.spies.CallLog recorded with model= and optimizer=; `reference` the
    reference_run of the same cycles (it knows each cycle's size); `returned_losses` what the
    student's function returned (a list of Python floats, one per update; omit it to skip that
    check); `final_params` the student's parameters after the run; `stale_grads` what .grad held
    before the run; `activation_peaks` (the student's peak of saved activations, one micro-batch's,
    and optionally the layers' graph record and the largest micro-batch's rows) judges memory once
    the parameters are right (without it, the backward passes are counted, unless
    `memory_judged_outside`: the grader measures the loop's memory from outside the kernel instead,
    helpers.checks.accumulation.loop.check_cycle_memory).
    """
    n = reference.num_micro_batches
    backwards = log.count("backward")
    if final_params is not None and compare(final_params, reference.final_params).close(rtol=RTOL, atol=ATOL):
        # The outcome is right. What the parameters cannot show is the memory it took: one
        # micro-batch's activations at a time is what accumulation is for.
        if activation_peaks is not None:
            peak_saved, single_peak, *graph_record = activation_peaks
            check_activation_memory(peak_saved, single_peak, backwards, n, *graph_record)
        elif backwards != n and not memory_judged_outside:
            raise mistake(
                "backward_not_per_micro_batch",
                f"the final parameters are right, but backward ran {backwards} times for {n} micro-batches: "
                "run one forward and one backward per micro-batch (a backward over a whole cycle at once "
                "keeps every micro-batch's activations in memory, which accumulation exists to avoid)")
        if returned_losses is not _NOT_GIVEN:
            check_returned_losses(returned_losses, [cycle.loss for cycle in reference.cycles])
        return
    _explain_wrong_updates(log, reference, backwards, stale_grads)
    if final_params is not None:
        result = compare(final_params, reference.final_params)
        raise mistake("parameters_changed_outside_step",
                      "the gradients each step saw were right but the final parameters are not "
                      f"({result}): change the parameters only through optimizer.step()")
    if returned_losses is not _NOT_GIVEN:
        check_returned_losses(returned_losses, [cycle.loss for cycle in reference.cycles])


def _explain_wrong_updates(log, reference: Reference, backwards: int, stale_grads: GradDict | None) -> None:
    """Name what made the updates differ from the reference's: the backward or step counts, then the
    first update whose gradient differs (a classic mistake, or old gradients leaking in)."""
    k, n = reference.accum_steps, reference.num_micro_batches
    expected_updates = len(reference.cycles)
    steps = log.of("step")
    tail = n % k
    if backwards == n - tail and tail and len(steps) == expected_updates - 1:
        # The backward count alone would say "one backward per micro-batch", which the loop did for
        # every micro-batch it ran: what it skipped is the last cycle.
        raise mistake(
            "last_cycle_skipped",
            f"the loop ran {backwards} of {n} micro-batches and stepped {len(steps)} times: with "
            f"accum_steps={k} the last, shorter cycle ({tail} micro-batch{'es' if tail > 1 else ''}) never "
            f"ran or got its step. Run it too: {expected_updates} cycles, the last one shorter")
    if backwards != n:
        raise mistake("backward_not_per_micro_batch",
                      f"backward ran {backwards} times for {n} micro-batches: "
                      "run exactly one backward per micro-batch")
    if len(steps) != expected_updates:
        if len(steps) == n:
            raise mistake(
                "step_every_micro_batch",
                f"optimizer.step() ran {n} times for {n} micro-batches with accum_steps={k}: "
                f"step only when a cycle is full ({expected_updates} steps)")
        if len(steps) < expected_updates and n % k:
            raise mistake(
                "last_cycle_not_stepped",
                f"optimizer.step() ran {len(steps)} times, but {n} micro-batches with accum_steps={k} "
                f"make {expected_updates} cycles: the last, shorter cycle never got its step, and its "
                "gradients would leak into the next epoch")
        if len(steps) == expected_updates + 1 and n % k == 0:
            raise mistake(
                "extra_step_after_last_cycle",
                f"optimizer.step() ran {len(steps)} times, but {n} micro-batches with accum_steps={k} make "
                f"exactly {expected_updates} cycles: your loop stepped once more after the last full cycle, "
                "with no micro-batch left (there are ceil(micro-batches / accum_steps) cycles)")
        raise mistake("wrong_step_count",
                      f"optimizer.step() ran {len(steps)} times; expected {expected_updates}, "
                      "one per cycle of accum_steps micro-batches")
    for update, (call, cycle) in enumerate(zip(steps, reference.cycles, strict=True), 1):
        diagnosis = _gradient_diagnosis(call.info["grads"], cycle, update, cycle.size, k,
                                        stale=stale_grads if update == 1 else None)
        if diagnosis:
            name, problem = diagnosis
            raise mistake(name, problem)


def check_returned_losses(returned, expected: Sequence[float], rtol: float = 1e-4) -> None:
    """Assert that `returned` is a list of Python floats, one per update, close to `expected`."""
    if not isinstance(returned, (list, tuple)):
        raise mistake("wrong_return_type",
                      f"your function returned {type(returned).__name__}, not a list: return a "
                      "list with one float per update, the mean loss of that cycle")
    kinds = {type(v).__name__ for v in returned if not isinstance(v, numbers.Real) or isinstance(v, bool)}
    if kinds:
        raise mistake(
            "loss_not_python_float",
            f"the returned losses hold {', '.join(sorted(kinds))}, not Python floats: sum loss.detach() "
            "over the cycle and call .item() once per update (a tensor that still requires grad keeps "
            "its whole graph in memory)")
    got = [float(v) for v in returned]
    if len(got) != len(expected) or any(not near(a, b, rtol=rtol, atol=rtol)
                                        for a, b in zip(got, expected, strict=False)):
        raise mistake(
            "wrong_loss_returned",
            f"returned losses {[float(f'{v:.6g}') for v in got]}, but the mean losses of the cycles were "
            f"{[float(f'{v:.6g}') for v in expected]}: return one number per update, the cycle's mean "
            "loss (the sum of its scaled micro-batch losses)")
