"""The student's side of the mixed-precision checks (lesson 01): call the function, report plain data.

Each collector runs next to the student's code (the notebook's kernel), gets the inputs the check
chose, calls the student's function inside `stderr_on_stdout()` and returns what came out and what
the spies saw while it ran. It judges nothing: helpers.checks.precision does, in the grader's
process at grading (see helpers.transport.remote). An optimizer or a GradScaler cannot travel: the
collector builds them from the specs the check sends (helpers.collect.specs).

The tools the checks hand to a student's function live here too (ReusedLeafModel, a model a test
cell builds and the kernel must rebuild).
"""

from __future__ import annotations

import torch
from torch import nn

from helpers import spies
from helpers.collect.specs import PLAIN_TYPES, build_optimizer, build_scaler, first_linear_dtypes, plain_calls
from helpers.grads import param_snapshot
from helpers.transport import remote
from helpers.transport.capture import stderr_on_stdout


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


# ---------------------------------------------------------------- optimizers and scalers, as specs

# ---------------------------------------------------------------- the collectors

@remote.collector
def collect_cast_fate(cast_fate, values: torch.Tensor, dtype: torch.dtype) -> dict:
    """cast_fate(values, dtype)."""
    with stderr_on_stdout():
        return remote.called(cast_fate, values, dtype)


def _plain_key_or_value(item):
    return item if isinstance(item, (*PLAIN_TYPES, torch.dtype)) else repr(item)[:80]


# Everything a hook can be attached with, on a module or for every module, as the check names it.
MODULE_HOOKS = {"_forward_hooks": "forward hooks", "_forward_pre_hooks": "forward pre-hooks",
                "_backward_hooks": "backward hooks", "_backward_pre_hooks": "backward pre-hooks"}
PARAMETER_HOOKS = {"_backward_hooks": "gradient hooks on parameters",
                   "_post_accumulate_grad_hooks": "post-accumulate-grad hooks on parameters"}


def module_attributes(model: nn.Module) -> dict[str, set[str]]:
    """Each module's own attributes, buffers, parameters and submodules by name: what an audit
    could attach to the model and leave there."""
    return {name: set(vars(m)) | set(m._buffers) | set(m._parameters) | set(m._modules)
            for name, m in model.named_modules()}


def audit_trace(model: nn.Module, attributes_before: dict[str, set[str]] | None = None) -> dict:
    """What an audit may leave behind: the kinds of hooks still on the model's modules and
    parameters ("module_hooks"), the kinds registered for every module ("global_hooks"), the
    attributes it added to a module ("added", against `attributes_before`), and the parameters as
    they are now."""
    from torch.nn.modules import module as module_globals

    left = [name for attribute, name in MODULE_HOOKS.items()
            if any(getattr(m, attribute, None) for m in model.modules())]
    left += [name for attribute, name in PARAMETER_HOOKS.items()
             if any(getattr(p, attribute, None) for p in model.parameters())]
    global_left = [name for attribute, name in MODULE_HOOKS.items()
                   if getattr(module_globals, "_global" + attribute, None)]
    added = []
    if attributes_before is not None:
        for name, now in module_attributes(model).items():
            new_keys = sorted(now - attributes_before.get(name, now))
            added += [f"{name}.{key}" if name else key for key in new_keys]
    return {"module_hooks": left, "global_hooks": global_left, "added": added[:20],
            "parameters": param_snapshot(model)}


@remote.collector
def collect_autocast_audit(audit, model: nn.Module, x: torch.Tensor, dtype: torch.dtype) -> dict:
    """audit(model, x, dtype): the report as it was returned (keys and values the check cannot read
    shown as their repr), how often a ReusedLeafModel ran, and what the audit left behind."""
    calls_before = model.calls if isinstance(model, ReusedLeafModel) else None
    attributes_before = module_attributes(model)
    with stderr_on_stdout():
        outcome = remote.called(audit, model, x, dtype)
    # Read at once: a hook the audit left behind must not run into the report or the count.
    if "value" in outcome:
        report = outcome.pop("value")
        if isinstance(report, dict):
            outcome["value"] = {_plain_key_or_value(k): _plain_key_or_value(v) for k, v in report.items()}
        else:
            outcome["returned"] = type(report).__name__
    if calls_before is not None:
        outcome["calls"] = model.calls - calls_before
    outcome["trace"] = audit_trace(model, attributes_before)
    return outcome


@remote.collector
def collect_amp_train_step(step, model: nn.Module, optimizer: dict, scaler: dict, args: tuple,
                           kwargs: dict) -> dict:
    """step(model, optimizer, scaler, *args, **kwargs) with the optimizer and the GradScaler built
    from their specs: the loss it returned (if a float), what the spies recorded, the dtypes the
    first Linear produced, and the parameters, the scale and its growth tracker afterwards."""
    built_optimizer = build_optimizer(optimizer, model.parameters())
    built_scaler = build_scaler(scaler)
    with spies.record(model=model, optimizer=built_optimizer, scaler=built_scaler) as log, \
            first_linear_dtypes(model) as dtypes, stderr_on_stdout():
        outcome = remote.called(step, model, built_optimizer, built_scaler, *args, **kwargs)
    if "value" in outcome:
        loss = outcome.pop("value")
        if isinstance(loss, float):
            outcome["value"] = float(loss)
        else:
            outcome["returned"] = type(loss).__name__
    return {**outcome, "calls": plain_calls(log), "dtypes": list(dtypes),
            "parameters": param_snapshot(model), "scale": float(built_scaler.get_scale()),
            "growth_tracker": int(built_scaler._get_growth_tracker())}
