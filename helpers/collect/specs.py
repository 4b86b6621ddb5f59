"""What every lesson's collectors share: the objects that cannot travel, rebuilt from their specs,
and what the spies recorded, sent back as plain data.

An optimizer or a GradScaler cannot cross to the kernel, so a check sends its spec
(`optimizer_spec`, `scaler_spec`, or a literal dict of the same shape) and the collector builds it
on the model it got (`build_optimizer`, `build_scaler`). A spies.CallLog goes back as
`plain_calls`; the judges rebuild it with helpers.checks.call_logs.call_log.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from helpers import spies

# The types a value crosses as itself (anything else travels as its repr, or not at all).
PLAIN_TYPES = (type(None), bool, int, float, str)


def optimizer_spec(optimizer: torch.optim.Optimizer) -> dict:
    """What rebuilds `optimizer` on other parameters: its torch.optim class and plain hyper-parameters."""
    defaults = {name: value for name, value in optimizer.defaults.items()
                if isinstance(value, PLAIN_TYPES) or (isinstance(value, tuple) and all(
                    isinstance(item, PLAIN_TYPES) for item in value))}
    return {"class": type(optimizer).__name__, "defaults": defaults}


def build_optimizer(spec: dict, parameters: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
    """The optimizer `optimizer_spec` describes, on `parameters`."""
    cls = getattr(torch.optim, spec["class"], None)
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        raise ValueError(f"{spec['class']!r} is not an optimizer of torch.optim")
    return cls(list(parameters), **spec["defaults"])


def scaler_spec(scaler: torch.amp.GradScaler) -> dict:
    """What rebuilds `scaler` fresh: its device and the settings it was made with."""
    return {"device": scaler._device, "init_scale": float(scaler._init_scale),
            "growth_factor": float(scaler._growth_factor), "backoff_factor": float(scaler._backoff_factor),
            "growth_interval": int(scaler._growth_interval), "enabled": bool(scaler._enabled)}


def build_scaler(spec: dict) -> torch.amp.GradScaler:
    """The GradScaler `scaler_spec` describes, as it was before its first step."""
    settings = dict(spec)
    return torch.amp.GradScaler(settings.pop("device"), **settings)


def plain_calls(log: spies.CallLog) -> list[dict]:
    """The recorded calls as plain data, [{"name": ..., "info": {...}}, ...] in order. Every info
    value the spies record is a number, a string, a bool, None, a list of those or a
    {name: tensor or None} dict of gradients."""
    return [{"name": call.name, "info": dict(call.info)} for call in log.calls]


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
