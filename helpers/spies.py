"""Spies that record what training code did: optimizer, scaler, scheduler, backward, clip.

The DataLoader and host-sync spies live in helpers.loader_spies and helpers.host_syncs; the
lessons reach them from here as spies.record_loaders and spies.record_host_syncs."""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

# Re-imported for the lessons and the collectors, which use them as spies.<name>.
from helpers.host_syncs import SyncLog, record_host_syncs  # noqa: F401
from helpers.loader_spies import LoaderLog, record_loaders  # noqa: F401

CALL_NAMES = (
    "zero_grad", "backward", "step", "scale", "unscale_", "scaler_step", "update", "clip",
    "clip_value", "scheduler_step",
)


@dataclass
class Call:
    """One recorded call: its name (see CALL_NAMES), position in the log and details."""

    name: str
    index: int
    info: dict = field(default_factory=dict)


class CallLog:
    """The calls recorded by `record`, in the order they happened."""

    def __init__(self) -> None:
        self.calls: list[Call] = []

    def _add(self, name: str, **info) -> Call:
        call = Call(name, len(self.calls), dict(info))
        self.calls.append(call)
        return call

    @staticmethod
    def _check_name(name: str) -> str:
        if name not in CALL_NAMES:
            raise ValueError(f"unknown call name {name!r}; known names are {', '.join(CALL_NAMES)}")
        return name

    def names(self) -> list[str]:
        """Return the recorded call names in order."""
        return [call.name for call in self.calls]

    def count(self, name: str) -> int:
        """Return how many calls named `name` were recorded."""
        self._check_name(name)
        return sum(call.name == name for call in self.calls)

    def of(self, name: str) -> list[Call]:
        """Return the recorded calls named `name`, in order."""
        self._check_name(name)
        return [call for call in self.calls if call.name == name]

    def __len__(self) -> int:
        return len(self.calls)

    def summary(self) -> str:
        """Return the call names with runs compressed, e.g. 'zero_grad, backward x4, step'."""
        if not self.calls:
            return "(no calls)"
        parts: list[str] = []
        run_name, run_length = self.calls[0].name, 0
        for name in [*self.names(), None]:
            if name == run_name:
                run_length += 1
                continue
            parts.append(run_name if run_length == 1 else f"{run_name} x{run_length}")
            run_name, run_length = name, 1
        return ", ".join(parts)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return f"CallLog({self.summary()})"


def _patch_method(stack: contextlib.ExitStack, owner, attribute: str,
                  make_spy: Callable[[Callable], Callable]) -> None:
    """Shadow owner.attribute with a bound spy on the instance; the exit stack restores it."""
    instance_dict = vars(owner)
    had_own_attribute = attribute in instance_dict
    previous = instance_dict.get(attribute)
    original = getattr(owner, attribute)
    spy = make_spy(original)

    # Copying __dict__ keeps markers such as the LR scheduler's `_wrapped_by_lr_sched`.
    @functools.wraps(original, assigned=("__name__", "__qualname__", "__doc__"))
    def method(instance, *args, **kwargs):
        if instance is not owner:
            # copy.deepcopy(owner) rebinds this method to the copy: there it must be the plain
            # method, neither recording nor acting on the original object.
            return getattr(type(instance), attribute)(instance, *args, **kwargs)
        return spy(*args, **kwargs)

    # inspect.signature would follow __wrapped__ to the bound original and drop a parameter.
    del method.__wrapped__

    # A bound method rather than a plain function: an LR scheduler created inside the context
    # wraps optimizer.step through its `__func__`, which a plain function lacks.
    setattr(owner, attribute, types.MethodType(method, owner))

    def restore() -> None:
        if had_own_attribute:
            setattr(owner, attribute, previous)
        else:
            delattr(owner, attribute)

    stack.callback(restore)


def _parameter_labels(optimizer: torch.optim.Optimizer, model: nn.Module | None):
    names = {} if model is None else {id(p): name for name, p in model.named_parameters()}
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    return [(names.get(id(p), f"p{i}"), p) for i, p in enumerate(parameters)]


def _spy_optimizer(stack, log: CallLog, optimizer, model, snapshot_grads: bool) -> None:
    labelled = _parameter_labels(optimizer, model)

    def make_step(original):
        def step(*args, **kwargs):
            call = log._add("step")
            if snapshot_grads:
                call.info["grads"] = {
                    name: None if p.grad is None else p.grad.detach().clone()
                    for name, p in labelled
                }
            return original(*args, **kwargs)
        return step

    def make_zero_grad(original):
        def zero_grad(set_to_none: bool = True):
            log._add("zero_grad", set_to_none=bool(set_to_none), source="optimizer")
            return original(set_to_none)
        return zero_grad

    _patch_method(stack, optimizer, "step", make_step)
    _patch_method(stack, optimizer, "zero_grad", make_zero_grad)


def _spy_model(stack, log: CallLog, model: nn.Module) -> None:
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise ValueError("model has no parameter that requires grad, so no backward can be seen")
    # A leaf's tensor hook runs once per backward pass that computes its gradient, however often
    # the leaf was used, and for loss.backward() and torch.autograd.grad alike: so it counts
    # backward passes, whichever API ran them. A pass that never reaches this parameter is not seen.
    def on_backward(_gradient: torch.Tensor) -> None:
        log._add("backward")

    handle = trainable[0].register_hook(on_backward)
    stack.callback(handle.remove)

    def make_zero_grad(original):
        def zero_grad(set_to_none: bool = True):
            log._add("zero_grad", set_to_none=bool(set_to_none), source="model")
            return original(set_to_none)
        return zero_grad

    _patch_method(stack, model, "zero_grad", make_zero_grad)


def _spy_scaler(stack, log: CallLog, scaler, optimizer) -> None:
    inside_scaler_step = [False]

    def make_scale(original):
        def scale(outputs):
            call = log._add("scale")
            result = original(outputs)
            call.info["scale"] = float(scaler.get_scale())
            return result
        return scale

    def make_unscale(original):
        def unscale_(optimizer_to_unscale):
            # scaler.step unscales by itself when the user did not; that is not the user's call.
            if not inside_scaler_step[0]:
                log._add("unscale_")
            return original(optimizer_to_unscale)
        return unscale_

    def make_step(original):
        def step(optimizer_to_step, *args, **kwargs):
            call = log._add("scaler_step")
            steps_before = log.count("step")
            inside_scaler_step[0] = True
            try:
                return original(optimizer_to_step, *args, **kwargs)
            finally:
                inside_scaler_step[0] = False
                if optimizer_to_step is optimizer:
                    call.info["optimizer_stepped"] = log.count("step") > steps_before
        return step

    def make_update(original):
        def update(new_scale=None):
            call = log._add("update", scale_before=float(scaler.get_scale()))
            result = original(new_scale)
            call.info["scale_after"] = float(scaler.get_scale())
            return result
        return update

    _patch_method(stack, scaler, "scale", make_scale)
    _patch_method(stack, scaler, "unscale_", make_unscale)
    _patch_method(stack, scaler, "step", make_step)
    _patch_method(stack, scaler, "update", make_update)


def _spy_scheduler(stack, log: CallLog, scheduler) -> None:
    def make_step(original):
        def step(*args, **kwargs):
            call = log._add("scheduler_step")
            result = original(*args, **kwargs)
            call.info["last_lr"] = list(scheduler.get_last_lr())
            return result
        return step

    _patch_method(stack, scheduler, "step", make_step)


def _spy_clip(stack, log: CallLog) -> None:
    clip_module = torch.nn.utils.clip_grad
    previous_in_module = clip_module.clip_grad_norm_
    previous_in_utils = torch.nn.utils.clip_grad_norm_
    inside_clip_grad_norm = False

    @functools.wraps(previous_in_module)
    def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                        foreach=None):
        nonlocal inside_clip_grad_norm
        call = log._add("clip")
        inside_clip_grad_norm = True
        try:
            total_norm = previous_in_module(parameters, max_norm, norm_type, error_if_nonfinite,
                                            foreach)
        finally:
            inside_clip_grad_norm = False
        # The returned total norm is the norm of the gradients before they were clipped.
        call.info.update(norm_seen=float(total_norm), max_norm=float(max_norm),
                         norm_type=float(norm_type))
        return total_norm

    # Both names: `torch.nn.utils.clip_grad_norm_` is a separate binding of the same function.
    clip_module.clip_grad_norm_ = clip_grad_norm_
    torch.nn.utils.clip_grad_norm_ = clip_grad_norm_
    stack.callback(setattr, clip_module, "clip_grad_norm_", previous_in_module)
    stack.callback(setattr, torch.nn.utils, "clip_grad_norm_", previous_in_utils)

    # Clipping each entry instead of the norm: recorded so that a wrong gradient can be named.
    value_in_module, value_in_utils = clip_module.clip_grad_value_, torch.nn.utils.clip_grad_value_

    @functools.wraps(value_in_module)
    def clip_grad_value_(parameters, clip_value, *args, **kwargs):
        log._add("clip_value").info.update(clip_value=float(clip_value))
        return value_in_module(parameters, clip_value, *args, **kwargs)

    clip_module.clip_grad_value_ = clip_grad_value_
    torch.nn.utils.clip_grad_value_ = clip_grad_value_
    stack.callback(setattr, clip_module, "clip_grad_value_", value_in_module)
    stack.callback(setattr, torch.nn.utils, "clip_grad_value_", value_in_utils)

    # clip_grad_norm_ scales the gradients through this module-level function, looked up at call
    # time: patching it also sees code that imported clip_grad_norm_ by name earlier, and the
    # two-step get_total_norm + clip_grads_with_norm_ (public since torch 2.6).
    previous_scaling = getattr(clip_module, "_clip_grads_with_norm_", None)
    if previous_scaling is None:
        return
    previous_public_scaling = getattr(torch.nn.utils, "clip_grads_with_norm_", None)

    @functools.wraps(previous_scaling)
    def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
        if not inside_clip_grad_norm:
            log._add("clip").info.update(norm_seen=float(total_norm), max_norm=float(max_norm),
                                         norm_type=None)
        return previous_scaling(parameters, max_norm, total_norm, foreach)

    clip_module._clip_grads_with_norm_ = clip_grads_with_norm_
    stack.callback(setattr, clip_module, "_clip_grads_with_norm_", previous_scaling)
    if previous_public_scaling is not None:
        torch.nn.utils.clip_grads_with_norm_ = clip_grads_with_norm_
        stack.callback(setattr, torch.nn.utils, "clip_grads_with_norm_", previous_public_scaling)


@contextlib.contextmanager
def record(
    *,
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scaler: torch.amp.GradScaler | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    patch_clip: bool = True,
    snapshot_grads: bool = True,
) -> Iterator[CallLog]:
    """Record calls on the given objects (and clip_grad_norm_) into a CallLog while active.

    "step" calls carry info["grads"], a snapshot of the optimizer's gradients keyed by the model's
    parameter names (or "p0", "p1", ...), unless snapshot_grads is False. Clipping is seen however
    clip_grad_norm_ was imported; "clip" calls carry info["norm_seen"] (the norm before clipping),
    "max_norm" and "norm_type" (None for the two-step get_total_norm + clip_grads_with_norm_).
    """
    expected = (
        ("model", model, nn.Module, "torch.nn.Module"),
        ("optimizer", optimizer, torch.optim.Optimizer, "torch.optim.Optimizer"),
        ("scaler", scaler, torch.amp.GradScaler, "torch.amp.GradScaler"),
        ("scheduler", scheduler, torch.optim.lr_scheduler.LRScheduler,
         "torch.optim.lr_scheduler.LRScheduler"),
    )
    for label, value, kind, kind_name in expected:
        if value is not None and not isinstance(value, kind):
            raise TypeError(f"{label} must be a {kind_name}, got {type(value).__name__}")
    log = CallLog()
    with contextlib.ExitStack() as stack:
        if model is not None:
            _spy_model(stack, log, model)
        if optimizer is not None:
            _spy_optimizer(stack, log, optimizer, model, snapshot_grads)
        if scaler is not None:
            _spy_scaler(stack, log, scaler, optimizer)
        if scheduler is not None:
            _spy_scheduler(stack, log, scheduler)
        if patch_clip:
            _spy_clip(stack, log)
        yield log
