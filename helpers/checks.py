"""Reference runs and diagnoses for the gradient-accumulation exercises.

Each check compares a student's run (recorded by helpers.spies) with a reference computed
on a copy of the model from whole, concatenated batches: the thing accumulation must reproduce.
When they differ, the check recomputes the gradients that each classic mistake would have
produced and names the mistake that matches.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from helpers.capture import stderr_on_stdout
from helpers.grads import clone_model, compare, grad_snapshot, param_snapshot

Batch = tuple[torch.Tensor, torch.Tensor]
GradDict = dict[str, torch.Tensor]

# Accumulated and full-batch gradients differ only by float32 summation order.
RTOL = 1e-4
ATOL = 1e-6


@dataclass
class CycleReference:
    """What one optimizer update should see (its cycle has `size` micro-batches), plus the
    gradients of the classic mistakes."""

    grads: GradDict
    loss: float
    size: int
    mistakes: dict[str, GradDict] = field(default_factory=dict)


@dataclass
class Reference:
    """A full-batch SGD run: one CycleReference per update and the final parameters."""

    cycles: list[CycleReference]
    final_params: GradDict
    accum_steps: int
    num_micro_batches: int


def _concat(cycle: Sequence[Batch]) -> Batch:
    return torch.cat([x for x, _ in cycle]), torch.cat([y for _, y in cycle])


def _micro_grads(model: nn.Module, loss_fn: Callable, cycle: Sequence[Batch]) -> list[GradDict]:
    grads = []
    for x, y in cycle:
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        grads.append(grad_snapshot(model))
    model.zero_grad(set_to_none=True)
    return grads


def _weighted_sum(grads: list[GradDict], weights: list[float]) -> GradDict:
    return {name: sum(w * g[name] for g, w in zip(grads, weights, strict=True)) for name in grads[0]}


def _clip(grads: GradDict, max_norm: float) -> GradDict:
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads.values()]))
    factor = min(1.0, max_norm / (float(norm) + 1e-6))
    return {name: g * factor for name, g in grads.items()}


def _mistakes(micro: list[GradDict], sizes: list[int], accum_steps: int,
              max_norm: float | None) -> dict[str, GradDict]:
    count = len(micro)
    mistakes = {}
    if max_norm is not None:
        # Checked first: with equal micro-batches the unclipped gradient equals some of the
        # weighting mistakes below, and "not clipped" is then the true diagnosis.
        mistakes["not_clipped"] = _weighted_sum(micro, [s / sum(sizes) for s in sizes])
        running = None
        for grads in micro:
            step = {n: g / accum_steps for n, g in grads.items()}
            running = step if running is None else {n: running[n] + step[n] for n in step}
            running = _clip(running, max_norm)
        mistakes["clipped_every_micro_batch"] = running
    mistakes.update({
        "no_division": _weighted_sum(micro, [1.0] * count),
        "last_micro_batch_only": _weighted_sum(micro[-1:], [1.0 / accum_steps]),
        "last_micro_batch_only_undivided": micro[-1],
        "equal_weights": _weighted_sum(micro, [1.0 / count] * count),
    })
    if count != accum_steps:
        # In a full cycle this equals "equal_weights"; only a short cycle tells them apart.
        mistakes["divided_by_accum_steps"] = _weighted_sum(micro, [1.0 / accum_steps] * count)
    return mistakes


def reference_run(model: nn.Module, loss_fn: Callable, cycles: Sequence[Sequence[Batch]], *,
                  lr: float, max_norm: float | None = None,
                  accum_steps: int | None = None) -> Reference:
    """Plain SGD (p -= lr * grad) on a copy of `model`, one update per cycle of (x, y) micro-batches.

    Each update uses the gradient of loss_fn over the whole cycle concatenated (loss_fn must
    average over samples, like F.cross_entropy), clipped to `max_norm` if given. The model
    itself is not touched. `accum_steps` (default: the longest cycle) is only used to name
    mistakes such as dividing a short cycle by accum_steps.
    """
    if not cycles or any(len(cycle) == 0 for cycle in cycles):
        raise ValueError("reference_run needs at least one cycle, each with at least one micro-batch")
    twin = clone_model(model)
    accum_steps = accum_steps or max(len(cycle) for cycle in cycles)
    references = []
    for cycle in cycles:
        micro = _micro_grads(twin, loss_fn, cycle)
        x, y = _concat(cycle)
        loss = loss_fn(twin(x), y)
        loss.backward()
        full = grad_snapshot(twin)
        if max_norm is not None:
            full = _clip(full, max_norm)
        sizes = [len(mx) for mx, _ in cycle]
        references.append(CycleReference(full, loss.item(), len(cycle),
                                         _mistakes(micro, sizes, accum_steps, max_norm)))
        with torch.no_grad():
            for name, param in twin.named_parameters():
                param -= lr * full[name]
        twin.zero_grad(set_to_none=True)
    return Reference(references, param_snapshot(twin), accum_steps, sum(len(c) for c in cycles))


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
    missing = [name for name, g in candidate.items() if g is None]
    if missing:
        return (f"at update {update} the parameters {missing[:3]} had no gradient: "
                "run loss.backward() for every micro-batch before optimizer.step()")
    result = compare(candidate, cycle.grads)
    if result.close(rtol=RTOL, atol=ATOL):
        return None
    if stale is not None and all(stale.get(name) is not None for name in candidate):
        without = {name: g - stale[name] for name, g in candidate.items()}
        if _matches_cycle(without, cycle):
            return STALE_MESSAGE.format(update=update)
    for mistake, grads in cycle.mistakes.items():
        if compare(candidate, grads).close(rtol=RTOL, atol=ATOL):
            return MISTAKE_MESSAGES[mistake].format(update=update, k=accum_steps, n=cycle_size)
    return (f"the gradient at update {update} differs from the full-batch gradient of its cycle "
            f"({result}): it should be the gradient of the mean loss over all samples of the cycle")


_NOT_GIVEN = object()


def check_updates(log, reference: Reference,
                  returned_losses: Sequence[float] | None = _NOT_GIVEN, *,
                  final_params: GradDict | None = None, stale_grads: GradDict | None = None) -> None:
    """Assert that a recorded run made the reference's updates; the message names the first mistake.

    `log` is a helpers.spies.CallLog recorded with model= and optimizer=; `reference` the
    reference_run of the same cycles (it knows each cycle's size); `returned_losses` what the
    student's function returned (a list of Python floats, one per update; omit it to skip that
    check); `final_params` the student's parameters after the run; `stale_grads` what .grad held
    before the run.
    """
    k, n = reference.accum_steps, reference.num_micro_batches
    expected_updates = len(reference.cycles)
    steps = log.of("step")
    backwards = log.count("backward")
    if backwards != n:
        raise AssertionError(f"loss.backward() ran {backwards} times for {n} micro-batches: "
                             "run exactly one backward per micro-batch")
    if len(steps) != expected_updates:
        if len(steps) == n:
            raise AssertionError(
                f"optimizer.step() ran {n} times for {n} micro-batches with accum_steps={k}: "
                f"step only when a cycle is full ({expected_updates} steps)")
        if len(steps) < expected_updates and n % k:
            raise AssertionError(
                f"optimizer.step() ran {len(steps)} times, but {n} micro-batches with accum_steps={k} "
                f"make {expected_updates} cycles: the last, shorter cycle never got its step, and its "
                "gradients would leak into the next epoch")
        if len(steps) == expected_updates + 1 and n % k == 0:
            raise AssertionError(
                f"optimizer.step() ran {len(steps)} times, but {n} micro-batches with accum_steps={k} make "
                f"exactly {expected_updates} cycles: your loop stepped once more after the last full cycle, "
                "with no micro-batch left (there are ceil(micro-batches / accum_steps) cycles)")
        raise AssertionError(f"optimizer.step() ran {len(steps)} times; expected {expected_updates}, "
                             "one per cycle of accum_steps micro-batches")
    for update, (call, cycle) in enumerate(zip(steps, reference.cycles, strict=True), 1):
        problem = diagnose_gradient(call.info["grads"], cycle, update, cycle.size, k,
                                    stale=stale_grads if update == 1 else None)
        if problem:
            raise AssertionError(problem)
    if final_params is not None:
        result = compare(final_params, reference.final_params)
        if not result.close(rtol=RTOL, atol=ATOL):
            raise AssertionError("the gradients were right but the final parameters are not "
                                 f"({result}): change the parameters only through optimizer.step()")
    if returned_losses is not _NOT_GIVEN:
        check_returned_losses(returned_losses, [cycle.loss for cycle in reference.cycles])


def check_returned_losses(returned, expected: Sequence[float], rtol: float = 1e-4) -> None:
    """Assert that `returned` is a list of Python floats, one per update, close to `expected`."""
    if not isinstance(returned, (list, tuple)):
        raise AssertionError(f"your function returned {type(returned).__name__}, not a list: return a "
                             "list with one float per update, the mean loss of that cycle")
    kinds = {type(v).__name__ for v in returned if not isinstance(v, numbers.Real) or isinstance(v, bool)}
    if kinds:
        raise AssertionError(
            f"the returned losses hold {', '.join(sorted(kinds))}, not Python floats: sum loss.detach() "
            "over the cycle and call .item() once per update (a tensor that still requires grad keeps "
            "its whole graph in memory)")
    got = [float(v) for v in returned]
    if len(got) != len(expected) or any(not math.isclose(a, b, rel_tol=rtol, abs_tol=rtol)
                                        for a, b in zip(got, expected, strict=False)):
        raise AssertionError(
            f"returned losses {[float(f'{v:.6g}') for v in got]}, but the mean losses of the cycles were "
            f"{[float(f'{v:.6g}') for v in expected]}: return one number per update, the cycle's mean "
            "loss (the sum of its scaled micro-batch losses)")


def token_references(model: nn.Module, micro_batches: Sequence[Batch], ignore_index: int = -100):
    """(full, naive, loss) for next-token micro-batches of logits-producing `model`.

    full: gradients of the mean cross-entropy over every real token of all micro-batches, from
    one forward over all sequences right-padded to a common length (the model is causal, so the
    padding changes nothing). naive: gradients of the mean of per-micro-batch means, the
    October 2024 bug. loss: the full-batch mean loss. The model itself is not touched.
    """
    if not micro_batches:
        raise ValueError("token_references needs at least one micro-batch")
    twin = clone_model(model)
    length = max(inputs.shape[1] for inputs, _ in micro_batches)
    pad = [(F.pad(i, (0, length - i.shape[1])), F.pad(t, (0, length - t.shape[1]), value=ignore_index))
           for i, t in micro_batches]
    inputs, targets = _concat(pad)
    loss = F.cross_entropy(twin(inputs).flatten(0, 1), targets.flatten(), ignore_index=ignore_index)
    loss.backward()
    full = grad_snapshot(twin)
    twin.zero_grad(set_to_none=True)
    for i, t in micro_batches:
        mean = F.cross_entropy(twin(i).flatten(0, 1), t.flatten(), ignore_index=ignore_index)
        (mean / len(micro_batches)).backward()
    naive = grad_snapshot(twin)
    return full, naive, loss.item()


def check_token_gradients(candidate: GradDict, full: GradDict, naive: GradDict,
                          before: GradDict | None = None) -> None:
    """Assert that `candidate` equals the full-batch token-mean gradient; name the naive bug if it matches.

    `before`: what .grad held when the student's function was called. The function must add
    its gradient to it (the caller clears), so `candidate - before` is compared.
    """
    missing = [name for name, g in candidate.items() if g is None]
    if missing:
        raise AssertionError(f"after your function the parameters {missing[:3]} have no .grad: "
                             "call backward() on each micro-batch's loss")
    if before is not None:
        if compare(candidate, full).close(rtol=RTOL, atol=ATOL):
            raise AssertionError(
                "your function cleared the gradients that .grad held when it was called: do not call "
                "zero_grad (or set .grad to None); the caller clears them, and may accumulate several "
                "calls into one update")
        candidate = {name: g - before[name] if before.get(name) is not None else g
                     for name, g in candidate.items()}
    result = compare(candidate, full)
    if result.close(rtol=RTOL, atol=ATOL):
        return
    if compare(candidate, naive).close(rtol=RTOL, atol=ATOL):
        raise AssertionError(
            "your gradient is the average of per-micro-batch mean losses, the October 2024 "
            "gradient-accumulation bug: a micro-batch with 3 tokens weighs as much as one with 40. "
            "Sum the token losses (reduction='sum') and divide by the real tokens of the whole cycle")
    doubled = {name: 2 * g for name, g in full.items()}
    if compare(candidate, doubled).close(rtol=RTOL, atol=ATOL):
        raise AssertionError("your gradient is twice the expected one: did .grad hold gradients from "
                             "an earlier call? Do not call backward twice per micro-batch")
    flat_candidate = torch.cat([g.flatten() for g in candidate.values()])
    flat_full = torch.cat([g.flatten() for g in full.values()])
    ratio = float(flat_candidate @ flat_full) / max(float(flat_full @ flat_full), 1e-30)
    if abs(ratio - 1) > 1e-3 and compare(candidate, {n: ratio * g for n, g in full.items()}).close(
            rtol=RTOL, atol=ATOL):
        raise AssertionError(
            f"your gradient differs from the full-batch token-mean gradient by a factor: it is {ratio:.4g} "
            "times it. The direction is right, the divisor is wrong: divide the summed token loss by the "
            "number of real target tokens (targets != ignore_index) of the whole cycle")
    raise AssertionError(f"your gradient differs from the full-batch token-mean gradient ({result}): "
                         "each token of the cycle must weigh 1 / (real tokens in the whole cycle)")


# What torch raises for the classic GradScaler mistakes of an accumulation loop, and what the
# course says about each. Matched on torch's own message, so each fixed text appears only when
# its cause is the cause.
TORCH_ERRORS = (
    ("No inf checks were recorded prior to update",
     "scaler.update() ran without a scaler.step(optimizer) since the last update: update the scale "
     "once per optimizer step, right after scaler.step(optimizer), not after every micro-batch (the "
     "scale must stay the same for all micro-batches of a cycle)"),
    ("unscale_() has already been called on this optimizer since the last update()",
     "scaler.unscale_(optimizer) ran twice in one cycle: unscale once per cycle, after the last "
     "micro-batch's backward, right before clipping"),
    ("step() has already been called since the last update()",
     "scaler.step(optimizer) ran twice without scaler.update() between them: step and update once "
     "per cycle, after the last micro-batch's backward"),
    ("Attempted update but _scale is None",
     "scaler.update() ran but no loss went through scaler.scale(loss): backward through "
     "scaler.scale(loss) for every micro-batch"),
)


@contextmanager
def student_code(function: str, *, num_micro_batches: int | None = None,
                 accum_steps: int | None = None, ignore_index: int | None = None) -> Iterator[None]:
    """`running` (below) for lesson 02: GradScaler's errors are named by TORCH_ERRORS. With
    `num_micro_batches` and `accum_steps` (none of the micro-batches empty), a ZeroDivisionError is
    named as an empty cycle; with `ignore_index`, cross_entropy's "Target <ignore_index> is out of
    bounds" as an ignore_index not passed on. Any other error propagates unchanged.
    """
    known = list(TORCH_ERRORS)
    if ignore_index is not None:
        known.append((f"Target {ignore_index} is out of bounds",
                      f"The padding targets hold ignore_index={ignore_index}, and cross_entropy took them "
                      "for a class: pass ignore_index=ignore_index on to F.cross_entropy (and count the "
                      "real tokens with it)"))
    with running(function, known):
        try:
            yield
        except ZeroDivisionError as error:
            if num_micro_batches is None or accum_steps is None:
                raise
            cycles = math.ceil(num_micro_batches / accum_steps)
            raise AssertionError(
                f"{function} stopped with ZeroDivisionError: {error}. The test passed {num_micro_batches} "
                f"micro-batches, none of them empty, with accum_steps={accum_steps}: that makes {cycles} "
                f"cycles (ceil({num_micro_batches} / {accum_steps})), and a count of zero means your loop "
                "made one more, empty cycle") from None


def check_amp_calls(log, num_micro_batches: int, num_updates: int) -> None:
    """Assert the GradScaler call pattern: scale every backward's loss, then unscale_, clip, step
    and update once per optimizer update, in that order."""
    scaled = log.count("scale")
    if scaled != num_micro_batches:
        raise AssertionError(f"scaler.scale(loss) ran {scaled} times for {num_micro_batches} "
                             "backward passes: every backward must go through scaler.scale(loss), or "
                             "the gradients are not scaled and scaler.step divides them by the scale anyway")
    clips = log.count("clip")
    if clips == num_micro_batches and num_micro_batches != num_updates:
        raise AssertionError(f"clip_grad_norm_ ran after every micro-batch ({clips} times): clip once per "
                             "cycle, after the last backward, so it sees the complete gradient")
    once_per_update = (("unscale_", "scaler.unscale_(optimizer)"),
                       ("scaler_step", "scaler.step(optimizer)"),
                       ("update", "scaler.update()"))
    for name, meaning in once_per_update:
        count = log.count(name)
        if count != num_updates:
            raise AssertionError(f"{meaning} ran {count} times for {num_updates} optimizer updates: "
                                 "call it exactly once per update")
    order = [c.name for c in log.calls if c.name in ("unscale_", "clip", "scaler_step", "update")]
    expected = ["unscale_", "clip", "scaler_step", "update"]
    if not clips:
        expected.remove("clip")
    if order == expected * num_updates:
        return
    position = {name: order.index(name) for name in set(order)}
    if clips and position["clip"] < position["unscale_"]:
        first_clip = log.of("clip")[0]
        scale = log.of("scale")[0].info.get("scale") if log.count("scale") else None
        raise AssertionError(
            "the gradients were clipped before unscale_: clipping saw gradients multiplied by the scale "
            f"{scale:g} (norm {first_clip.info['norm_seen']:.3g}), so max_norm cut them to almost nothing. "
            "Call scaler.unscale_(optimizer) before clip_grad_norm_")
    if position["update"] < position["scaler_step"]:
        raise AssertionError("scaler.update() ran before scaler.step(optimizer): step first, then update "
                             "the scale for the next iteration")
    raise AssertionError(f"the calls ran in the order {', '.join(order[:8])}; each update should run "
                         "unscale_, clip_grad_norm_, scaler.step, scaler.update, in that order")


@contextmanager
def first_linear_dtypes(model: nn.Module) -> Iterator[list[torch.dtype]]:
    """Yield a list that collects the output dtype of each call of the model's first nn.Linear,
    which tells whether a forward pass ran under autocast."""
    first = next((m for m in model.modules() if isinstance(m, nn.Linear)), None)
    if first is None:
        raise ValueError("first_linear_dtypes needs a model with at least one nn.Linear layer")
    seen: list[torch.dtype] = []
    handle = first.register_forward_hook(lambda _module, _args, output: seen.append(output.dtype))
    try:
        yield seen
    finally:
        handle.remove()


# ---------------------------------------------------------------------------------------------
# Lesson 01 (mixed precision): running the student's code, and what its classic errors mean.

# Errors a realistic mistake makes torch (or Python) raise inside an exercise of lesson 01, matched
# on the message's own words, and what the course says about each. A pattern appears only in the
# error its mistake causes, so each fixed text is shown only when its cause is the cause.
CAST_FATE_ERRORS = (
    ("Boolean value of Tensor with more than one value is ambiguous",
     "an `if` compared whole tensors: decide the fate of one value at a time (for example over "
     "values.tolist() and the cast values' .tolist())"),
    ("cannot be converted to Scalar",
     ".item() or float() was called on the whole tensor: take one value at a time"),
    ("'float' object has no attribute",
     "values.tolist() gives Python floats, which have no dtype: cast the whole tensor first "
     "(values.to(dtype)), then compare value by value"),
)
AUDIT_ERRORS = (
    ("must be Tensor, not",
     "a layer received something that is not a tensor: a forward hook that returns a value "
     "replaces the module's output. Record the dtype and return None from the hook"),
    ("object has no attribute 'dtype'",
     "a hook read .dtype of something that is not a tensor: the hook is called as "
     "hook(module, inputs, output), and output is the tensor to read"),
)
AMP_STEP_ERRORS = (
    ("did not use scaler.scale(loss",
     "every backward must go through scaler.scale(loss): call scaler.scale(loss).backward(), "
     "not loss.backward()"),
    ("unscale_() has already been called on this optimizer since the last update()",
     "scaler.unscale_(optimizer) ran twice in one step: unscale once, after backward and before "
     "clipping; scaler.step knows the gradients are already unscaled"),
    ("No inf checks were recorded for this optimizer",
     "scaler.step(optimizer) found no gradients: they were cleared between backward and step. "
     "Clear old gradients at the start of the step, before the forward pass"),
    ("backward through the graph a second time",
     "backward ran twice on the same loss: call scaler.scale(loss).backward() once"),
    ("does not require grad and does not have a grad_fn",
     "the loss has no graph to backward through: do not run the forward under torch.no_grad() "
     "or inference_mode, and call .item() only on the value you return"),
    ("outputs must be a Tensor",
     "scaler.scale() needs the loss tensor: call .item() only for the value you return"),
)


@contextmanager
def running(function: str, known: Sequence[tuple[str, str]] = ()) -> Iterator[None]:
    """Run a student's function inside a test: what it writes to stderr, warnings
    included, goes to stdout (so Validate agrees with grading), NotImplementedError propagates,
    and an error whose message holds a pattern of `known` becomes an AssertionError that quotes
    it and adds the course's words. Any other error propagates unchanged."""
    with stderr_on_stdout():
        try:
            yield
        except NotImplementedError:
            raise
        except Exception as error:
            for pattern, advice in known:
                if pattern in str(error):
                    raise AssertionError(f"{function} stopped with {type(error).__name__}: {error} "
                                         f"{advice}") from None
            raise


class ReusedLeafModel(nn.Module):
    """A model whose ReLU `act` runs twice, on a float32 input and then on a Linear's output, so
    under autocast its two outputs differ in dtype; `unused` never runs. Each forward records, in
    `ran`, every leaf that ran in the order it first ran with its LAST output's dtype (what
    Exercise 2 asks for), in `first` each leaf's first output dtype, and counts itself in `calls`."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.act = nn.ReLU()
        self.lin = nn.Linear(width, width)
        self.unused = nn.Linear(width, width)
        self.ran: dict[str, torch.dtype] = {}
        self.first: dict[str, torch.dtype] = {}
        self.calls = 0

    def _run(self, name: str, h: torch.Tensor) -> torch.Tensor:
        out = getattr(self, name)(h)
        self.first.setdefault(name, out.dtype)
        self.ran[name] = out.dtype
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.ran, self.first = {}, {}
        h = self._run("act", x)         # a float32 input: ReLU returns float32
        h = self._run("lin", h)         # under autocast: 16 bits
        return self._run("act", h)      # the same ReLU again, now on a 16-bit input


def replay(model: ReusedLeafModel, x: torch.Tensor, dtype: torch.dtype) -> ReusedLeafModel:
    """Run a ReusedLeafModel once under autocast (no gradients) so its `ran` and `first` hold the
    reference for Exercise 2; returns the model."""
    with torch.no_grad(), torch.autocast(x.device.type, dtype=dtype):
        model(x)
    return model


def check_audit(report, expected: dict, model_label: str, first: dict | None = None) -> None:
    """Assert an Exercise 2 report equals `expected` ({leaf name: last output dtype}, in the order
    the leaves first ran). `first` (a leaf's first output dtype) names the leaf that ran twice."""
    if not isinstance(report, dict):
        raise AssertionError(f"autocast_audit should return a dict, got {type(report).__name__}")
    never_ran = [name for name in report if name not in expected]
    if never_ran:
        raise AssertionError(
            f"for {model_label}, the report names {never_ran}, which did not run as a leaf in this "
            f"forward pass (the leaves that ran are {list(expected)}): report only leaf modules, "
            "those without children, and only those that ran")
    not_dtypes = {name: value for name, value in report.items() if not isinstance(value, torch.dtype)}
    if not_dtypes:
        name, value = next(iter(not_dtypes.items()))
        raise AssertionError(f"the report maps {name!r} to {value!r} ({type(value).__name__}): map each "
                             "leaf's name to the torch.dtype of its output, such as torch.bfloat16")
    if report and expected and all(d == torch.float32 for d in report.values()) and \
            any(d != torch.float32 for d in expected.values()):
        raise AssertionError("every layer ran in float32: run the forward pass inside torch.autocast(...)")
    if list(report) != list(expected):
        twice = [name for name in (first or {}) if first[name] != expected[name]]
        if twice and set(report) == set(expected):
            raise AssertionError(
                f"for {model_label}, the report lists {list(report)}, but the leaves first ran in the order "
                f"{list(expected)}: {twice[0]!r} runs twice and keeps the place of its first run")
        raise AssertionError(f"for {model_label}, the report should name the leaf modules {list(expected)} "
                             f"in the order they ran, got {list(report)}")
    for name, dtype in expected.items():
        if report[name] == dtype:
            continue
        if first and name in first and report[name] == first[name] != dtype:
            raise AssertionError(
                f"for {model_label}, {name!r} ran twice, first giving {first[name]} and last {dtype}; your "
                f"audit says {report[name]}: a leaf that runs twice reports its LAST output's dtype")
        raise AssertionError(f"for {model_label}, {name} produced {dtype} under autocast, your audit "
                             f"says {report[name]}")


def check_audit_left_no_trace(model: nn.Module, params_before: GradDict) -> None:
    """Assert that Exercise 2 removed its forward hooks (module and global) and kept the parameters."""
    if any(module._forward_hooks for module in model.modules()):
        raise AssertionError("remove your forward hooks before returning")
    if torch.nn.modules.module._global_forward_hooks:
        raise AssertionError("remove the global forward hook before returning")
    if compare(param_snapshot(model), params_before).max_abs_error != 0:
        raise AssertionError("the parameters changed")


@dataclass
class AmpStepReference:
    """What one correct mixed-precision step gives the optimizer: the clipped and the unclipped
    unscaled gradients, and the loss (float), all from the same autocast forward."""

    grads: GradDict
    unclipped: GradDict
    loss: float
    loss_outside: GradDict  # the clipped gradient when only the forward, not the loss, ran under autocast


def amp_reference_step(model: nn.Module, loss_fn: Callable, x: torch.Tensor, y: torch.Tensor,
                       max_norm: float, amp_dtype: torch.dtype, scale: float) -> AmpStepReference:
    """The reference of Exercise 3, on a copy of `model` (left untouched): forward and loss under
    autocast in amp_dtype, backward of loss x scale, gradients divided by scale in float32, then
    clipped to max_norm. Same arithmetic as a correct step, so an honest answer matches it to
    float32 rounding (a float32 reference differs by the 16-bit rounding, several percent)."""
    def unscaled(loss_under_autocast: bool) -> tuple[GradDict, torch.Tensor]:
        clone = clone_model(model)
        with torch.autocast(x.device.type, dtype=amp_dtype):
            output = clone(x)
            loss = loss_fn(output, y) if loss_under_autocast else None
        loss = loss_fn(output, y) if loss is None else loss
        (loss * scale).backward()
        return {name: None if g is None else g / scale for name, g in grad_snapshot(clone).items()}, loss

    unclipped, loss = unscaled(True)
    outside, _ = unscaled(False)
    return AmpStepReference(_clip(unclipped, max_norm), unclipped, float(loss.detach()),
                            _clip(outside, max_norm))


def check_amp_step_gradient(candidate: GradDict, reference: AmpStepReference, max_norm: float,
                            stale: float | None = None, scale: float | None = None,
                            rtol: float = 1e-4) -> None:
    """Assert that the gradient Exercise 3's optimizer stepped with is the reference's clipped one
    (relative error below rtol; honest answers differ by about 1e-7), else name the mistake it
    matches: gradients cleared before the step, not clipped, the loss outside autocast, or old
    gradients (`stale` in every .grad before the step, scaled by `scale`) added in."""
    if all(g is None for g in candidate.values()):
        raise AssertionError("the optimizer stepped with no gradients at all: they were cleared between "
                             "backward and step. Clear old gradients at the start of the step")
    result = compare(candidate, reference.grads)
    if result.relative_error < rtol:
        return
    if max_norm < float("inf") and compare(candidate, reference.unclipped).relative_error < rtol:
        raise AssertionError(f"the gradient was not clipped to max_norm={max_norm:g} ({result}): call "
                             "clip_grad_norm_(model.parameters(), max_norm) after scaler.unscale_(optimizer)")
    if compare(candidate, reference.loss_outside).relative_error < rtol:
        raise AssertionError(f"the gradient is that of a loss computed outside torch.autocast ({result}): "
                             "compute the loss inside the with block too (outside it, a loss of 16-bit "
                             "outputs runs in 16 bits on a CPU)")
    if stale is not None and scale:
        leaked = _clip({n: g + stale / scale for n, g in reference.unclipped.items()}, max_norm)
        if compare(candidate, leaked).relative_error < rtol:
            raise AssertionError(f"the step used the new gradient plus what .grad held before ({result}): "
                                 "clear old gradients first (optimizer.zero_grad(set_to_none=True))")
    raise AssertionError(
        f"with max_norm={max_norm:g} the gradient given to the optimizer differs from the unscaled, "
        f"clipped gradient of the same autocast forward ({result}): unscale_, then clip, then step")


def check_cast_fate(cast_fate: Callable, values: torch.Tensor, reference: Callable,
                    unseen: bool = False) -> None:
    """Exercise 1: assert cast_fate(values, dtype) equals the test's reference(values, dtype) for
    float16 and bfloat16, value by value (each value printed exactly, as float32 holds it). With
    `unseen`, one message counts the wrong fates of the hidden values and shows the first."""
    for dtype in (torch.float16, torch.bfloat16):
        with running("cast_fate", CAST_FATE_ERRORS):
            got = cast_fate(values, dtype)
        want = reference(values, dtype)
        if not (isinstance(got, list) and len(got) == len(want)):
            shown = f"{len(got)} items" if unseen and isinstance(got, list) else repr(got)
            raise AssertionError(f"cast_fate should return a list with one string per value ({len(want)}), "
                                 f"got {shown}")
        wrong = [(v, g, w) for v, g, w in zip(values.tolist(), got, want, strict=True) if g != w]
        if unseen and wrong:
            v, g, w = wrong[0]
            raise AssertionError(f"on unseen values in {dtype}, {len(wrong)} fates are wrong, e.g. "
                                 f"{v:.9g} should be {w!r}, not {g!r}")
        if wrong:
            v, g, w = wrong[0]
            raise AssertionError(f"in {dtype}, {v:.9g} should be {w!r}, your function says {g!r}")


def check_autocast_audit(audit: Callable, model: nn.Module, x: torch.Tensor, dtype: torch.dtype,
                         label: str, reference: Callable | None = None) -> dict:
    """Exercise 2: run audit(model, x, dtype) once and assert its report equals the reference: the
    test's `reference(model, x, dtype)` replay, or for a ReusedLeafModel its own record (and one
    forward call); then that no hook is left and the parameters are unchanged. Returns the report."""
    before = param_snapshot(model)
    with running("autocast_audit", AUDIT_ERRORS):
        report = audit(model, x, dtype)
    report = dict(report) if isinstance(report, dict) else report   # before a replay runs any hook left
    if isinstance(model, ReusedLeafModel):
        calls = model.calls
        replay(model, x, dtype)
        if calls != 1:
            raise AssertionError(f"autocast_audit ran the model {calls} times: run model(x) once")
        check_audit(report, model.ran, label, first=model.first)
    else:
        check_audit(report, reference(model, x, dtype), label)
    check_audit_left_no_trace(model, before)
    return report


def check_amp_train_step(amp_train_step: Callable, seed: int, x: torch.Tensor, y: torch.Tensor,
                         max_norm: float, amp_dtype: torch.dtype, init_scale: float = 1024.0):
    """Exercise 3: one amp_train_step on a fresh MLP(6, 8, 3, seed) whose .grad holds 5.0 from an
    earlier step, with a real CPU GradScaler; assert a float loss, the forward in amp_dtype, one
    optimizer step, the GradScaler call pattern, and the gradient and loss of amp_reference_step.
    Returns the call log."""
    from helpers import models, spies

    model = models.MLP(6, 8, 3, seed=seed)
    reference = amp_reference_step(model, F.cross_entropy, x, y, max_norm, amp_dtype, init_scale)
    for param in model.parameters():
        param.grad = torch.full_like(param, 5.0)      # left over from an earlier step
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    with spies.record(model=model, optimizer=optimizer, scaler=scaler) as log, \
            first_linear_dtypes(model) as dtypes, running("amp_train_step", AMP_STEP_ERRORS):
        loss = amp_train_step(model, optimizer, scaler, F.cross_entropy, x, y, max_norm=max_norm,
                              amp_dtype=amp_dtype)
    if not isinstance(loss, float):
        raise AssertionError(f"return the loss as a float (loss.item()), not {type(loss).__name__}")
    if not dtypes or set(dtypes) != {amp_dtype}:
        raise AssertionError(f"with amp_dtype={amp_dtype} the first Linear layer ran in "
                             f"{set(dtypes) or 'nothing'}: run the forward inside "
                             "torch.autocast(x.device.type, dtype=amp_dtype)")
    if log.count("step") != 1:
        raise AssertionError(f"the optimizer stepped {log.count('step')} times in one training step: "
                             "call only scaler.step(optimizer)")
    check_amp_calls(log, num_micro_batches=1, num_updates=1)
    check_amp_step_gradient(log.of("step")[0].info["grads"], reference, max_norm, stale=5.0, scale=init_scale)
    if abs(loss - reference.loss) > 1e-4 * max(1.0, abs(reference.loss)):
        raise AssertionError(f"returned {loss!r}, but the loss of the batch under autocast is "
                             f"{reference.loss!r}")
    return log


def check_amp_step_skips_inf(amp_train_step: Callable, x: torch.Tensor, y: torch.Tensor) -> None:
    """Exercise 3: with an inf in the input, a float16 step must leave the parameters unchanged, never
    call optimizer.step(), and halve the scale from 1024 to 512 (scaler.step, then scaler.update)."""
    from helpers import models, spies

    model = models.MLP(6, 8, 3, seed=33)
    before = param_snapshot(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    bad = x.clone()
    bad[0, 0] = float("inf")
    with spies.record(model=model, optimizer=optimizer, scaler=scaler) as log, \
            running("amp_train_step", AMP_STEP_ERRORS):
        amp_train_step(model, optimizer, scaler, F.cross_entropy, bad, y, 1.0, torch.float16)
    if log.count("step") != 0:
        raise AssertionError("the optimizer stepped although the gradients held inf: call "
                             "scaler.step(optimizer), never optimizer.step() directly, so that such "
                             "steps are skipped")
    after = compare(param_snapshot(model), before)
    if after.max_abs_error != 0:
        raise AssertionError(f"after an inf gradient the parameters changed ({after})")
    if scaler.get_scale() != 512.0:
        raise AssertionError(f"after an inf gradient the scale should halve from 1024 to 512, it is "
                             f"{scaler.get_scale()}: call scaler.update() after scaler.step()")
