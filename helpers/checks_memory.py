"""Reference measurements and diagnoses for the memory lesson's exercises (lesson 04).

Each check chooses the inputs, has the student's function run on them by its collector in
helpers.collect_memory (through helpers.remote: in the same process in the student's notebook, in
the sandboxed kernel at grading), measures the truth here (a real optimizer step, the saved-tensor
meter, a plain forward and backward) and raises an AssertionError that names the mistake it
recognises. An exception the student's code raised becomes an AssertionError saying what the
lesson says about it; NotImplementedError (the unanswered stub) passes through unchanged.

At grading this module is replaced by a stub inside the sandbox (GRADER_ONLY below): its
references are the exercises' answers, and the student's kernel never needs them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

import torch
from torch import nn

from helpers import remote
from helpers.collect_memory import (
    ActivationMeasure,
    collect_checkpointed_forward,
    collect_plan,
    collect_saved_bytes,
    collect_training_bytes,
)
from helpers.grads import clone_model, compare, grad_snapshot
from helpers.memory import SavedTensorMeter, gradient_bytes, optimizer_state_bytes, parameter_bytes

GRADER_ONLY = True

OPTIMIZERS = ("sgd", "sgd_momentum", "adam")
PARTS = ("parameters", "gradients", "optimizer")
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


def _training_hint(model: nn.Module, optimizer_name: str, part: str, got, want: int) -> str:
    if (optimizer_name, part) == ("adam", "optimizer"):
        return (": Adam keeps two buffers per parameter (exp_avg and exp_avg_sq) and a float32 step "
                "counter per parameter tensor")
    if not isinstance(got, int):
        return ""
    frozen = sum(_bytes(p) for p in model.parameters() if not p.requires_grad)
    if part in ("gradients", "optimizer") and frozen and got - want == frozen:
        return ": frozen parameters (requires_grad=False) get no gradient and no optimizer state"
    as_float32 = sum(p.numel() * 4 for p in model.parameters()
                     if part == "parameters" or p.requires_grad)
    not_float32 = any(p.dtype != torch.float32 for p in model.parameters())
    if part in ("parameters", "gradients") and not_float32 and got == as_float32 != want:
        return ": count each parameter's own element_size(); not every model is float32"
    return ""


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
            raise remote.failure("predict_training_bytes", error, advice=hint,
                                 expected="predicts the bytes of every slice for each optimizer")
        predicted = outcome["value"]
        if not isinstance(predicted, Mapping):
            raise AssertionError(f"predict_training_bytes should return a dict with the keys {list(PARTS)}, "
                                 f"got {type(predicted).__name__}: {predicted!r}")
        assert not outcome["ran"], ("predict_training_bytes ran the model: predict the bytes from the "
                                    "parameters alone, without running a step")
        actual = measure_training_bytes(model, optimizer_name)
        for part in PARTS:
            got = predicted.get(part)
            assert got == actual[part], (
                f"with {optimizer_name}{where}, {part} take {actual[part]} bytes, you predicted {got}"
                + _training_hint(model, optimizer_name, part, got, actual[part]))


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


def _saved_hint(model: nn.Sequential, batch_size: int, gap: int) -> str:
    """The one mistake whose size is exactly `gap` (predicted minus measured), or ""."""
    layers, sizes = list(model), _layer_inputs(model, batch_size)
    saves_its_input = (nn.Linear, nn.GELU, nn.LayerNorm)
    shared = sum(sizes[i + 1] for i, layer in enumerate(layers[:-1])
                 if isinstance(layer, nn.ReLU) and isinstance(layers[i + 1], saves_its_input))
    candidates = [
        (sum(m.weight.numel() * 4 for m in layers if isinstance(m, nn.Linear)),
         ": parameters are not activations; Linear keeps a reference to its weight, "
         "which costs nothing extra"),
        (shared, ": the ReLU's output and the next layer's input are one tensor, count it once"),
        (-sum(sizes[i] for i, m in enumerate(layers) if isinstance(m, nn.Dropout)),
         ": Dropout keeps its mask, a float32 tensor of its input's shape on a CPU"),
        (-sum(2 * batch_size * 4 for m in layers if isinstance(m, nn.LayerNorm)),
         ": LayerNorm also keeps a float32 mean and inverse standard deviation per row"),
    ]
    causes = [hint for size, hint in candidates if size == gap and size != 0]
    return causes[0] if len(causes) == 1 else ""      # two causes of one size: name neither


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
                hint = ""
                if error.type == "AttributeError" and "features" in error.message:
                    hint = ("only Linear has in_features and out_features: ReLU, GELU and Dropout keep "
                            "the width, and a LayerNorm's is layer.normalized_shape[0]")
                elif error.type == "TypeError" and "tuple" in error.message:
                    hint = "a LayerNorm's normalized_shape is a tuple: its width is layer.normalized_shape[0]"
                raise remote.failure("predict_saved_bytes", error, advice=hint,
                                 expected="predicts the bytes this model saves for backward")
            got = outcome["value"]
            gap = got - want if isinstance(got, int) and not isinstance(got, bool) else None
            assert got == want, (
                f"{_describe(model)} at batch {batch_size} saves {want} bytes for backward, "
                f"you predicted {got}"
                + (_saved_hint(model, batch_size, gap) if gap is not None else ""))


# ---------------------------------------------------------------- Exercise 3: checkpoint segments

def check_checkpointed_forward(function: Callable, model: nn.Module, x: torch.Tensor,
                               blocks_per_segment: int | None = None) -> None:
    """function(model, x[, blocks_per_segment]) must give model(x)'s output and gradients (parameters,
    and x's when x requires grad), save exactly one block input per segment of blocks and never warn
    about use_reentrant. blocks_per_segment=None calls without it: the default must be 1."""
    model = clone_model(model)          # fresh gradients, whatever ran on the test's model before
    depth, segment = len(model.blocks), blocks_per_segment or 1
    segments = math.ceil(depth / segment)
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
                                 expected="gives model(x)'s output and gradients, one saved input a segment")
    assert not [w for w in seen["warnings"] if "use_reentrant" in w], (
        "checkpoint warned about use_reentrant: pass use_reentrant=False explicitly")
    out = seen.get("output")
    assert isinstance(out, torch.Tensor) and out.shape == want.shape, (
        f"checkpointed_forward should return the model's output, a tensor of shape {list(want.shape)}, "
        f"got {seen.get('returned', 'Tensor')}{list(out.shape) if isinstance(out, torch.Tensor) else ''}")
    if not torch.allclose(out, want.detach(), rtol=RTOL, atol=1e-6):
        partial, kept = x.detach(), depth - depth % segment
        with torch.no_grad():
            for block in list(twin.blocks)[:kept]:
                partial = block(partial)
        dropped = kept < depth and torch.allclose(out, partial, rtol=RTOL, atol=1e-6)
        raise AssertionError(
            f"with {depth} blocks and {called} the output differs from model(x)'s"
            + (f": the last, shorter segment ({depth % segment} block) never ran; split the blocks into "
               f"segments of blocks_per_segment, the last one may be shorter" if dropped else
               ": run every block once, in order"))
    if not seen["requires_grad"]:
        raise AssertionError(
            "the output does not require grad, so nothing gets a gradient: "
            + ("with the reentrant checkpoint and an input that does not require grad nothing gets a "
               "gradient; pass use_reentrant=False" if seen.get("reentrant") else
               "run the blocks with autograd on (no torch.no_grad(), no .detach())"))
    if "backward_error" in seen:
        raise AssertionError(f"backward through your output failed ({seen['backward_error']})")
    grads = seen.get("grads")
    if not isinstance(grads, dict) or set(grads) != set(grad_snapshot(twin)):
        raise AssertionError("the gradients of the model's parameters did not come back from your function")
    result = compare(grads, grad_snapshot(twin))
    if result.missing:
        why = ": some parameters got no gradient; the graph was cut between segments (.detach() or no_grad)"
    else:
        # The output was right, so backward's recomputation ran something else than the forward did.
        why = (": the output was right, so the forward that checkpoint recomputed in backward ran other "
               "blocks (a lambda or closure written in a loop sees the loop variable's last value)")
    assert result.close(RTOL, ATOL), f"with {called} the gradients differ from model(x)'s ({result}){why}"
    if x.requires_grad:
        x_grad = seen.get("x_grad")
        assert isinstance(x_grad, torch.Tensor) and x_grad.shape == x_twin.grad.shape and torch.allclose(
            x_grad, x_twin.grad, rtol=RTOL, atol=ATOL), (
            f"with {called} the gradient of the input x differs from model(x)'s: pass x itself into the "
            "first checkpoint (no .detach(), no copy)")
    unit, saved = _bytes(x), seen["saved_bytes"]
    expected = segments * unit
    hint = ""
    if saved == unit and segments > 1:
        hint = ": you checkpointed the whole model as one segment"
    elif saved == depth * unit and segments != depth:
        hint = ": every block got its own checkpoint; group blocks_per_segment blocks into one"
    elif isinstance(saved, int) and saved > expected:
        hint = (": some blocks ran outside a checkpoint (checkpoint_sequential, for one, leaves its last "
                "segment unchecked)")
    assert saved == expected, (
        f"with {depth} blocks and {called}, {saved} bytes were saved for backward; "
        f"{segments} checkpointed segments keep exactly their {segments} inputs, {expected} bytes" + hint)


# ---------------------------------------------------------------- Exercise 4: a plan that fits

def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _odd_sizes(calls: list) -> list:
    return sorted({m for m, *_ in calls if isinstance(m, bool) or not isinstance(m, int) or m < 1}, key=repr)


def _call_planner(plan: Callable, effective_batch: int, budget: int, model: nn.Module) -> tuple[object, list]:
    outcome = remote.run_student(plan, collect_plan, effective_batch, budget, ActivationMeasure(model))
    calls = [call for call in outcome.get("calls", []) if isinstance(call, (list, tuple)) and call]
    error = remote.raised_of(outcome)
    if error is None:
        return outcome["value"], calls
    measure = ActivationMeasure(model)
    if error.type == "ValueError":
        fits = measure.bytes(1, True)
        if fits <= budget:
            raise AssertionError(
                f"plan_micro_batches raised ValueError ({error.message}), but a plan fits: micro-batch 1 "
                f"with checkpointing needs {fits} bytes, within the budget of {budget}")
        raise ValueError(error.message)
    hint = ""
    if error.type == "ZeroDivisionError" and _odd_sizes(calls):
        hint = (f"you tried micro-batches of {_odd_sizes(calls)}; micro-batches are the divisors of "
                "effective_batch, from 1 up")
    elif (error.type == "TypeError" and "positional argument" in error.message
          and "checkpointing" in error.message):
        hint = "call measure(micro_batch, checkpointing) with both arguments"
    raise remote.failure("plan_micro_batches", error, advice=hint,
                                 expected="returns the fastest plan that fits the budget")


def check_plan(plan: Callable, model: nn.Module, effective_batch: int, budget: int) -> dict:
    """plan(effective_batch, budget, measure) must keep the effective batch, fit the budget as
    measured, use checkpointing only when nothing fits without it, and take the largest divisor."""
    measure = ActivationMeasure(model)
    result, calls = _call_planner(plan, effective_batch, budget, model)
    assert isinstance(result, Mapping) and all(key in result for key in PLAN_KEYS), (
        f"plan_micro_batches should return a dict with the keys {list(PLAN_KEYS)}, got {result!r}")
    m, k, c = (result[key] for key in PLAN_KEYS)
    odd = _odd_sizes(calls)
    assert all(isinstance(v, int) and not isinstance(v, bool) for v in (m, k)), (
        f"micro_batch and accum_steps should be whole numbers (int), got {m!r} and {k!r}"
        + (": use effective_batch // micro_batch" if isinstance(k, float) else ""))
    assert m >= 1, f"micro_batch is {m}{f' (you tried {odd})' if odd else ''}: micro-batches run from 1 up"
    assert m * k == effective_batch, (
        f"micro_batch {m} x accum_steps {k} = {m * k}, but the effective batch is {effective_batch}: "
        "fit the budget with more accumulation steps, never by shrinking the effective batch")
    used = measure.bytes(m, bool(c))
    assert used <= budget, (
        f"the plan {dict(result)} needs {used} bytes of activations, over the budget of {budget}")
    if c:
        assert measure.bytes(1, False) > budget, (
            f"{dict(result)} uses checkpointing, but micro-batch 1 fits without it: "
            "checkpointing costs an extra forward")
    bigger = [d for d in _divisors(effective_batch) if d > m and measure.bytes(d, bool(c)) <= budget]
    assert not bigger, (
        f"{dict(result)}: micro-batch {bigger[-1]} also fits with checkpointing={c}; take the largest")
    return dict(result)


def check_plan_raises(plan: Callable, model: nn.Module, effective_batch: int, budget: int) -> None:
    """With a budget below micro-batch 1 with checkpointing, plan(...) must raise ValueError."""
    measure = ActivationMeasure(model)
    assert measure.bytes(1, True) > budget, f"the test's budget of {budget} bytes fits a plan"
    outcome = remote.run_student(plan, collect_plan, effective_batch, budget, ActivationMeasure(model))
    error = remote.raised_of(outcome)
    if error is not None and error.type == "ValueError":
        return
    if error is not None:
        raise AssertionError(f"with a budget of {budget} bytes nothing fits: raise ValueError, not "
                             f"{error.type} ({error.message})")
    raise AssertionError(f"with a budget of {budget} bytes nothing fits: raise ValueError "
                         f"(your function returned {outcome['value']!r})")
