"""Reference measurements and diagnoses for the memory lesson's exercises (lesson 04).

Each check chooses the inputs, has the student's function run on them by its collector in
helpers.collect.memory (through helpers.transport.remote: in the same process in the student's notebook, in
the sandboxed kernel at grading), measures the truth here (a real optimizer step, the saved-tensor
meter, the peak of a forward and backward done the reference's way and the known wrong ways) and
raises an AssertionError that names the mistake it recognises. An exception the student's code
raised becomes an AssertionError saying what the lesson says about it; NotImplementedError (the
unanswered stub) passes through unchanged.

At grading this module is replaced by a stub inside the sandbox (GRADER_ONLY below): its
references are the exercises' answers, and the student's kernel never needs them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from helpers.collect.memory import (
    PeakMeasure,
    collect_checkpointed_forward,
    collect_plan,
    collect_saved_bytes,
    collect_training_bytes,
)
from helpers.diagnosis import mistake
from helpers.grads import clone_model, compare, grad_snapshot, near
from helpers.memory import (
    SavedTensorMeter,
    gradient_bytes,
    optimizer_state_bytes,
    parameter_bytes,
    peak_bytes,
)
from helpers.transport import remote

OPTIMIZERS = ("sgd", "sgd_momentum", "adam")
PARTS = ("parameters", "gradients", "optimizer")
PART_WORDS = {"parameters": "the parameters take", "gradients": "the gradients take",
              "optimizer": "the optimizer's state takes"}
PLAN_KEYS = ("micro_batch", "accum_steps", "checkpointing")
# Checkpointing recomputes the same operations in the same order: the gradients match to rounding.
RTOL, ATOL = 1e-5, 1e-7


def _bytes(t: torch.Tensor | nn.Parameter) -> int:
    return t.numel() * t.element_size()


# ---------------------------------------------------------------- Exercise 1: predict the bytes

def make_optimizer(params: Iterable[torch.Tensor], optimizer_name: str) -> torch.optim.Optimizer:
    """The optimizer an exercise-1 name stands for: "sgd", "sgd_momentum" or "adam"."""
    makers = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1),
              "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
              "adam": lambda p: torch.optim.Adam(p, lr=1e-3)}
    if optimizer_name not in makers:
        raise ValueError(f"optimizer_name must be one of {OPTIMIZERS}, got {optimizer_name!r}")
    return makers[optimizer_name](list(params))


def measure_training_bytes(model: nn.Module, optimizer_name: str) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state after one real step on a copy of `model`.

    `model` takes inputs [batch, in_features] of its first Linear; its parameters may be any float
    dtype and some may be frozen (only those with requires_grad train)."""
    probe = clone_model(model)
    first_linear = next(m for m in probe.modules() if isinstance(m, nn.Linear))
    dtype = next(probe.parameters()).dtype
    optimizer = make_optimizer([p for p in probe.parameters() if p.requires_grad], optimizer_name)
    probe(torch.randn(4, first_linear.in_features, dtype=dtype)).float().pow(2).mean().backward()
    optimizer.step()
    return {"parameters": parameter_bytes(probe), "gradients": gradient_bytes(probe),
            "optimizer": optimizer_state_bytes(optimizer)}


def _training_hint(model: nn.Module, optimizer_name: str, part: str, got, want: int) -> tuple[str, str]:
    """Why `got` is not `want`, as (the mistake's name, what to add to the message)."""
    if (optimizer_name, part) == ("adam", "optimizer"):
        return "adam_state_miscounted", (": Adam keeps two buffers per parameter (exp_avg and exp_avg_sq) "
                                         "and a float32 step counter per parameter tensor")
    if not isinstance(got, int):
        return "wrong_prediction", ""
    frozen = sum(_bytes(p) for p in model.parameters() if not p.requires_grad)
    if part in ("gradients", "optimizer") and frozen and got - want == frozen:
        return "frozen_params_counted", (": frozen parameters (requires_grad=False) get no gradient and no "
                                         "optimizer state")
    as_float32 = sum(p.numel() * 4 for p in model.parameters()
                     if part == "parameters" or p.requires_grad)
    not_float32 = any(p.dtype != torch.float32 for p in model.parameters())
    if part in ("parameters", "gradients") and not_float32 and got == as_float32 != want:
        return "assumed_float32", ": count each parameter's own element_size(); not every model is float32"
    return "wrong_prediction", ""


def check_training_bytes(predict: Callable, model: nn.Module, optimizer_names: Iterable[str] = OPTIMIZERS,
                         label: str = "") -> None:
    """predict(model, name) must equal measure_training_bytes(model, name) for every name.

    The student's function gets a copy of `model` and must leave it as it was (no step run)."""
    where = f" ({label})" if label else ""
    for optimizer_name in optimizer_names:
        outcome = remote.run_student(predict, collect_training_bytes, clone_model(model), optimizer_name)
        error = remote.raised_of(outcome)
        if error is not None:
            hint = ("before any step p.grad is None: predict from the parameters themselves "
                    "(p.numel(), p.element_size())"
                    if error.type == "AttributeError" and "NoneType" in error.message else "")
            raise remote.failure("predict_training_bytes", error, advice=hint, cause="grad_read_before_step",
                                 expected="predicts the bytes of every slice for each optimizer")
        predicted = outcome["value"]
        if not isinstance(predicted, Mapping):
            raise mistake("wrong_return_type",
                          f"predict_training_bytes should return a dict with the keys {list(PARTS)}, "
                          f"got {type(predicted).__name__}: {predicted!r}")
        if outcome["ran"]:
            raise mistake("ran_model_to_predict",
                          "predict_training_bytes ran the model (or a module of its own, a "
                          "copy of it say): predict the bytes from the parameters alone, "
                          "without running a step")
        actual = measure_training_bytes(model, optimizer_name)
        for part in PARTS:
            got = predicted.get(part)
            if not (got == actual[part]):
                cause, hint = _training_hint(model, optimizer_name, part, got, actual[part])
                raise mistake(cause, f"with {optimizer_name}{where}, {PART_WORDS[part]} {actual[part]} "
                                     f"bytes, you predicted {got}" + hint)


# ---------------------------------------------------------------- Exercise 2: predict the activations

def _input_width(model: nn.Sequential) -> int:
    first = model[0]
    return first.in_features if isinstance(first, nn.Linear) else first.normalized_shape[0]


def measure_saved_bytes(model: nn.Sequential, batch_size: int) -> int:
    """Bytes the saved-tensor meter counts for model(x), x float32 [batch_size, in_features], on a CPU."""
    with SavedTensorMeter(model) as meter:
        model(torch.randn(batch_size, _input_width(model)))
    return meter.bytes


def _layer_inputs(model: nn.Sequential, batch_size: int) -> list[int]:
    """The bytes of the float32 tensor entering each layer, and of the model's output, last."""
    width, sizes = _input_width(model), []
    for layer in model:
        sizes.append(batch_size * width * 4)
        width = layer.out_features if isinstance(layer, nn.Linear) else width
    return sizes + [batch_size * width * 4]


def _saved_hint(model: nn.Sequential, batch_size: int, gap: int) -> tuple[str, str]:
    """The one mistake whose size is exactly `gap` (predicted minus measured), as (its name, what to add
    to the message), or ("wrong_prediction", "")."""
    layers, sizes = list(model), _layer_inputs(model, batch_size)
    saves_its_input = (nn.Linear, nn.GELU, nn.LayerNorm)
    shared = sum(sizes[i + 1] for i, layer in enumerate(layers[:-1])
                 if isinstance(layer, nn.ReLU) and isinstance(layers[i + 1], saves_its_input))
    candidates = [
        (sum(m.weight.numel() * 4 for m in layers if isinstance(m, nn.Linear)), "parameters_counted",
         ": parameters are not activations; Linear keeps a reference to its weight, "
         "which costs nothing extra"),
        (shared, "shared_tensor_counted_twice",
         ": the ReLU's output and the next layer's input are one tensor, count it once"),
        (-sum(sizes[i] for i, m in enumerate(layers) if isinstance(m, nn.Dropout)), "dropout_mask_missed",
         ": Dropout keeps its mask, a float32 tensor of its input's shape on a CPU"),
        (-sum(2 * batch_size * 4 for m in layers if isinstance(m, nn.LayerNorm)), "layernorm_stats_missed",
         ": LayerNorm also keeps a float32 mean and inverse standard deviation per row"),
    ]
    causes = [(name, hint) for size, name, hint in candidates if size == gap and size != 0]
    return causes[0] if len(causes) == 1 else ("wrong_prediction", "")   # two causes of one size: neither


def _describe(model: nn.Sequential) -> str:
    return ", ".join(type(m).__name__ for m in model)


def check_saved_bytes(predict: Callable, models: Iterable[nn.Sequential], batch_sizes: Iterable[int]) -> None:
    """predict(model, batch) must equal measure_saved_bytes(model, batch) for every model and batch."""
    batch_sizes = list(batch_sizes)
    for model in models:
        for batch_size in batch_sizes:
            # The reference is measured after the call: in the student's own process nothing on the
            # call stack holds it while their code runs.
            outcome = remote.run_student(predict, collect_saved_bytes, model, batch_size)
            want = measure_saved_bytes(model, batch_size)
            error = remote.raised_of(outcome)
            if error is not None:
                hint, cause = "", ""
                if error.type == "AttributeError" and "features" in error.message:
                    hint = ("only Linear has in_features and out_features: ReLU, GELU and Dropout keep "
                            "the width, and a LayerNorm's is layer.normalized_shape[0]")
                    cause = "width_of_non_linear_layer"
                elif error.type == "TypeError" and "tuple" in error.message:
                    hint = "a LayerNorm's normalized_shape is a tuple: its width is layer.normalized_shape[0]"
                    cause = "normalized_shape_is_tuple"
                raise remote.failure("predict_saved_bytes", error, advice=hint, cause=cause,
                                 expected="predicts the bytes this model saves for backward")
            got = outcome["value"]
            gap = got - want if isinstance(got, int) and not isinstance(got, bool) else None
            if not (got == want):
                cause, hint = (_saved_hint(model, batch_size, gap) if gap is not None
                               else ("wrong_prediction", ""))
                raise mistake(
                    cause,
                    f"{_describe(model)} at batch {batch_size} saves {want} bytes for backward, "
                    f"you predicted {got}"
                    + hint)


# ---------------------------------------------------------------- Exercise 3: checkpoint segments

def _run_blocks(h: torch.Tensor, blocks: list[nn.Module]) -> torch.Tensor:
    for block in blocks:
        h = block(h)
    return h


def segmented_forward(model: nn.Module, x: torch.Tensor, sizes: list[int], last_checkpointed: bool = True,
               preserve_rng_state: bool = True) -> torch.Tensor:
    """model's blocks on x in consecutive segments of these sizes, each one checkpointed (the last
    one too unless last_checkpointed is False)."""
    blocks, h, start = list(model.blocks), x, 0
    for index, size in enumerate(sizes):
        segment = blocks[start:start + size]
        start += size
        if index == len(sizes) - 1 and not last_checkpointed:
            h = _run_blocks(h, segment)
        else:
            h = checkpoint(_run_blocks, h, segment, use_reentrant=False,
                           preserve_rng_state=preserve_rng_state)
    return h


def segment_sizes(depth: int, per_segment: int) -> list[int]:
    return [min(per_segment, depth - start) for start in range(0, depth, per_segment)]


def forward_backward_peak(forward: Callable[[nn.Module, torch.Tensor], torch.Tensor], model: nn.Module,
                          x: torch.Tensor) -> int:
    """The peak bytes of forward(model, x) and the backward of its mean square, on a fresh copy of
    `model` (no gradients yet) and of x, as the collector measures the student's function."""
    def one_run() -> int:
        copy, x_copy = clone_model(model), x.detach().clone().requires_grad_(x.requires_grad)

        def forward_and_backward():
            out = forward(copy, x_copy)     # alive through backward, as the student's returned output is
            out.pow(2).mean().backward()

        return peak_bytes(forward_and_backward, "cpu")

    # The smaller of two runs, as the student's peak is measured (collect_checkpointed_forward).
    return min(one_run(), one_run())


ACCEPTED = ("segments", "last segment unchecked", "segments, no RNG state",
            "last segment unchecked, no RNG state")


def _checkpointing_ways(model: nn.Module, per_segment: int) -> dict[str, Callable]:
    """Each way of checkpointing the exercise knows, as forward(model, x): the ACCEPTED ones first."""
    depth = len(model.blocks)
    sizes = segment_sizes(depth, per_segment)
    shorter_first = sorted(sizes)

    def sequential(m, h):
        return checkpoint_sequential(nn.Sequential(*m.blocks), len(sizes), h, use_reentrant=False)

    # Each checkpoint keeps the CPU's RNG state (5 KiB) unless preserve_rng_state=False, which
    # this model without randomness allows: at the test's small sizes that shows in the peak.
    ways = {
        "segments": lambda m, h: segmented_forward(m, h, sizes),
        "last segment unchecked": lambda m, h: segmented_forward(m, h, sizes, last_checkpointed=False),
        "segments, no RNG state": lambda m, h: segmented_forward(m, h, sizes, preserve_rng_state=False),
        "last segment unchecked, no RNG state": lambda m, h: segmented_forward(
            m, h, sizes, last_checkpointed=False, preserve_rng_state=False),
        "every block": lambda m, h: segmented_forward(m, h, [1] * depth),
        "one segment": lambda m, h: segmented_forward(m, h, [depth]),
        "no checkpoint": lambda m, h: m(h),
        "checkpoint_sequential": sequential,
        "shorter segment first": lambda m, h: segmented_forward(m, h, shorter_first),
    }
    return ways


PEAK_HINTS = {
    "every block": "every block got its own checkpoint; group blocks_per_segment blocks into one",
    "one segment": "you checkpointed the whole model as one segment: its backward rebuilds every block's "
                   "insides at once, so the peak is the plain one plus a forward",
    "no checkpoint": "no block ran inside a checkpoint",
    "checkpoint_sequential": "checkpoint_sequential(blocks, n_segments, ...) cuts len(blocks) // n_segments "
                             "blocks per segment and runs the last one unchecked; its segments are not "
                             "blocks_per_segment long",
    "shorter segment first": "the segment that is shorter goes last: consecutive segments of "
                             "blocks_per_segment from the first block on",
}
# The name each of those mistakes goes by in a class report (helpers.diagnosis.mistake).
PEAK_MISTAKE_NAMES = {
    "every block": "checkpoint_every_block",
    "one segment": "one_checkpoint_segment",
    "no checkpoint": "no_checkpoint",
    "checkpoint_sequential": "used_checkpoint_sequential",
    "shorter segment first": "shorter_segment_first",
}


def _peak_hint(peak: int, peaks: dict[str, int], tolerance: int) -> tuple[str, str]:
    """The one known way of checkpointing whose peak the student's matches, as (its name in
    PEAK_MISTAKE_NAMES, what to add to the message), or ("wrong_peak", ""). The same allocations give
    the same peak to the byte, so an exact match outranks a near one."""
    mistakes = {name: value for name, value in peaks.items() if name in PEAK_HINTS}
    for slack in (0, tolerance):
        matched = [name for name, value in mistakes.items() if near(peak, value, atol=slack)]
        if matched:
            return ((PEAK_MISTAKE_NAMES[matched[0]], f": {PEAK_HINTS[matched[0]]}") if len(matched) == 1
                    else ("wrong_peak", ""))
    return "wrong_peak", ""


def check_checkpointed_forward(function: Callable, model: nn.Module, x: torch.Tensor,
                               blocks_per_segment: int | None = None) -> None:
    """function(model, x[, blocks_per_segment]) must give model(x)'s output and gradients (parameters,
    and x's when x requires grad), never warn about use_reentrant, and peak over forward and backward
    where consecutive checkpointed segments of blocks_per_segment blocks peak (the last segment may
    run unchecked: that lowers the peak slightly). blocks_per_segment=None calls without it: the
    default must be 1. The peak is judged within half the bytes of x."""
    model = clone_model(model)          # fresh gradients, whatever ran on the test's model before
    depth, segment = len(model.blocks), blocks_per_segment or 1
    args = () if blocks_per_segment is None else (blocks_per_segment,)
    called = f"blocks_per_segment={blocks_per_segment}" if args else "no blocks_per_segment (default 1)"
    twin, x_twin = clone_model(model), x.detach().clone().requires_grad_(x.requires_grad)
    want = twin(x_twin)
    want.pow(2).mean().backward()
    seen = remote.run_student(function, collect_checkpointed_forward, model,
                              x.detach().clone().requires_grad_(x.requires_grad), args)
    error = remote.raised_of(seen)
    if error is not None:
        hint = ("checkpoint's first argument is the function to run: a function of the segment's blocks "
                "or nn.Sequential(*blocks)" if error.type == "TypeError" and "not callable" in error.message
                else "")
        raise remote.failure("checkpointed_forward", error, advice=hint,
                             cause="checkpoint_given_non_callable",
                             expected="gives model(x)'s output and gradients at the peak of its segments")
    if "measure_error" in seen:
        raise mistake("measurement_disturbed",
                      f"the peak of checkpointed_forward could not be measured "
                      f"({seen['measure_error']}): leave torch.profiler and helpers.memory alone")
    if [w for w in seen["warnings"] if "use_reentrant" in w]:
        raise mistake("use_reentrant_not_passed",
                      "checkpoint warned about use_reentrant: pass use_reentrant=False explicitly")
    out = seen.get("output")
    if not (isinstance(out, torch.Tensor) and out.shape == want.shape):
        raise mistake(
            "wrong_return_type",
            f"checkpointed_forward should return the model's output, a tensor of shape {list(want.shape)}, "
            f"got {seen.get('returned', 'Tensor')}{list(out.shape) if isinstance(out, torch.Tensor) else ''}")
    if not torch.allclose(out, want.detach(), rtol=RTOL, atol=1e-6):
        partial, kept = x.detach(), depth - depth % segment
        with torch.no_grad():
            for block in list(twin.blocks)[:kept]:
                partial = block(partial)
        dropped = kept < depth and torch.allclose(out, partial, rtol=RTOL, atol=1e-6)
        raise mistake(
            "last_segment_dropped" if dropped else "wrong_output",
            f"with {depth} blocks and {called} the output differs from model(x)'s"
            + (f": the last, shorter segment ({depth % segment} block) never ran; split the blocks into "
               f"segments of blocks_per_segment, the last one may be shorter" if dropped else
               ": run every block once, in order"))
    if not seen["requires_grad"]:
        raise mistake(
            "reentrant_without_grad_input" if seen.get("reentrant") else "autograd_off",
            "the output does not require grad, so nothing gets a gradient: "
            + ("with the reentrant checkpoint and an input that does not require grad nothing gets a "
               "gradient; pass use_reentrant=False" if seen.get("reentrant") else
               "run the blocks with autograd on (no torch.no_grad(), no .detach())"))
    if "backward_error" in seen:
        raise mistake("backward_failed", f"backward through your output failed ({seen['backward_error']})")
    grads = seen.get("grads")
    if not isinstance(grads, dict) or set(grads) != set(grad_snapshot(twin)):
        raise mistake("evidence_unreadable",
                      "the gradients of the model's parameters did not come back from your function")
    result = compare(grads, grad_snapshot(twin))
    if result.missing:
        why = ": some parameters got no gradient; the graph was cut between segments (.detach() or no_grad)"
        cause = "graph_cut_between_segments"
    else:
        # The output was right, so backward's recomputation ran something else than the forward did.
        why = (": the output was right, so the forward that checkpoint recomputed in backward ran other "
               "blocks (a lambda or closure written in a loop sees the loop variable's last value)")
        cause = "recompute_ran_other_blocks"
    if not result.close(RTOL, ATOL):
        raise mistake(cause, f"with {called} the gradients differ from model(x)'s ({result}){why}")
    if x.requires_grad:
        x_grad = seen.get("x_grad")
        if not (isinstance(x_grad, torch.Tensor) and x_grad.shape == x_twin.grad.shape and torch.allclose(
                x_grad, x_twin.grad, rtol=RTOL, atol=ATOL)):
            raise mistake(
                "input_detached",
                f"with {called} the gradient of the input x differs from model(x)'s: pass x itself into the "
                "first checkpoint (no .detach(), no copy)")
    peak = seen.get("peak_bytes")
    if not isinstance(peak, int) or isinstance(peak, bool):
        raise mistake("evidence_unreadable",
                      f"the peak of checkpointed_forward came back as {peak!r}, not a number of bytes")
    ways, tolerance, peaks = _checkpointing_ways(model, segment), _bytes(x) // 2, {}
    for name in ACCEPTED:           # the usual answer matches the first: measure no more than needed
        peaks[name] = forward_backward_peak(ways[name], model, x)
        if near(peak, peaks[name], atol=tolerance):
            return
    for name, way in ways.items():  # a failure: the mistakes' peaks name the one it matches
        if name not in peaks:
            peaks[name] = forward_backward_peak(way, model, x)
    sizes = segment_sizes(depth, segment)
    cause, hint = _peak_hint(peak, peaks, tolerance)
    raise mistake(
        cause,
        f"with {depth} blocks and {called}, forward and backward peaked at {peak} bytes; "
        f"{len(sizes)} checkpointed segments of {segment} ({'+'.join(map(str, sizes))} blocks) peak at "
        f"{peaks['segments']} bytes: their saved inputs plus one segment's recomputed insides"
        + hint)


# ---------------------------------------------------------------- Exercise 4: a plan that fits

def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _odd_sizes(calls: list) -> list:
    return sorted({m for m, *_ in calls if isinstance(m, bool) or not isinstance(m, int) or m < 1}, key=repr)


class _PeakTable:
    """The grader's own measure for one check, each (micro_batch, checkpointing) measured once."""

    def __init__(self, model: nn.Module):
        self._measure, self._known = PeakMeasure(model), {}

    def __call__(self, micro_batch: int, checkpointing: bool) -> int:
        key = (micro_batch, bool(checkpointing))
        if key not in self._known:
            self._known[key] = self._measure.bytes(*key)
        return self._known[key]

    def best_plan(self, effective_batch: int, budget: int) -> tuple[int, bool] | None:
        """The largest divisor that fits, without checkpointing where it fits both ways; None if
        nothing fits."""
        for micro_batch in reversed(_divisors(effective_batch)):
            for checkpointing in (False, True):
                if self(micro_batch, checkpointing) <= budget:
                    return micro_batch, checkpointing
        return None


def _call_planner(plan: Callable, effective_batch: int, budget: int, model: nn.Module,
                  table: _PeakTable) -> tuple[object, list]:
    outcome = remote.run_student(plan, collect_plan, effective_batch, budget, PeakMeasure(model))
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
    raise remote.failure("plan_micro_batches", error, advice=hint, cause=cause,
                         expected="returns the plan with the largest micro-batch that fits the budget")


def check_plan(plan: Callable, model: nn.Module, effective_batch: int, budget: int) -> dict:
    """plan(effective_batch, budget, measure) must keep the effective batch, fit the budget as
    measured, take the largest micro-batch that fits with or without checkpointing, and checkpoint
    only when that micro-batch does not fit without it."""
    table = _PeakTable(model)
    result, calls = _call_planner(plan, effective_batch, budget, model, table)
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
    if c and table(m, False) == budget:
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
    best_m, best_c = table.best_plan(effective_batch, budget)
    # Measured and turned down although its peak equals the budget: the comparison was `<`.
    exactly = table(best_m, best_c) == budget and [best_m, best_c] in [list(call) for call in calls]
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
    outcome = remote.run_student(plan, collect_plan, effective_batch, budget, PeakMeasure(model))
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
