"""Exercise 1 of lesson 04: the bytes of parameters, gradients and optimizer state one training step keeps.

check_training_bytes compares the student's predict_training_bytes with measure_training_bytes, a real
optimizer step on a copy of the model, and names the slice (and the mistake) that differs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch
from torch import nn

from helpers.checks.memory.shared import _bytes
from helpers.collect.memory import collect_training_bytes
from helpers.collect.specs import build_optimizer
from helpers.diagnosis import mistake
from helpers.grads import clone_model
from helpers.memory import gradient_bytes, optimizer_state_bytes, parameter_bytes
from helpers.transport import errors, remote

OPTIMIZERS = ("sgd", "sgd_momentum", "adam")
PARTS = ("parameters", "gradients", "optimizer")
PART_WORDS = {"parameters": "the parameters take", "gradients": "the gradients take",
              "optimizer": "the optimizer's state takes"}


# ---------------------------------------------------------------- Exercise 1: predict the bytes

# What each of Exercise 1's optimizer names stands for, as helpers.collect.specs builds it.
OPTIMIZER_SPECS = {"sgd": {"class": "SGD", "defaults": {"lr": 0.1}},
                   "sgd_momentum": {"class": "SGD", "defaults": {"lr": 0.1, "momentum": 0.9}},
                   "adam": {"class": "Adam", "defaults": {"lr": 1e-3}}}


def make_optimizer(params: Iterable[torch.Tensor], optimizer_name: str) -> torch.optim.Optimizer:
    """The optimizer an exercise-1 name stands for: "sgd", "sgd_momentum" or "adam"."""
    if optimizer_name not in OPTIMIZER_SPECS:
        raise ValueError(f"optimizer_name must be one of {OPTIMIZERS}, got {optimizer_name!r}")
    return build_optimizer(OPTIMIZER_SPECS[optimizer_name], params)


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
            raise errors.failure("predict_training_bytes", error, advice=hint, cause="grad_read_before_step",
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
