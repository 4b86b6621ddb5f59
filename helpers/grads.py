"""Clone models, snapshot gradients and parameters, and compare them against a reference."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

# {parameter name: tensor}, as grad_snapshot and param_snapshot give it.
GradDict = dict[str, torch.Tensor]

def _require_module(model) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return model


def clone_model(model: nn.Module) -> nn.Module:
    """Return a deep copy of `model` on the same device/dtype with all .grad set to None."""
    clone = copy.deepcopy(_require_module(model))
    for parameter in clone.parameters():
        parameter.grad = None
    return clone


def grad_snapshot(model: nn.Module) -> dict[str, torch.Tensor | None]:
    """Return {parameter name: detached copy of its .grad (same shape/dtype) or None}."""
    return {
        name: None if p.grad is None else p.grad.detach().clone()
        for name, p in _require_module(model).named_parameters()
    }


def param_snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    """Return {parameter name: detached copy of the parameter (same shape/dtype)}."""
    return {name: p.detach().clone() for name, p in _require_module(model).named_parameters()}


@dataclass(frozen=True)
class Comparison:
    """How far a candidate set of tensors is from a reference set."""

    max_abs_error: float
    relative_error: float
    per_tensor: dict[str, float]
    missing: tuple[str, ...]
    unexpected: tuple[str, ...] = ()
    reference_max_abs: float = 0.0
    per_tensor_max_abs: dict[str, float] = field(default_factory=dict)

    def close(self, rtol: float = 1e-5, atol: float = 1e-7) -> bool:
        """True iff no tensor is missing/unexpected and max_abs_error <= atol + rtol * max|ref|.

        The tolerance scales with the largest reference entry, as torch.allclose does per entry,
        so one global bound works for gradients of any magnitude.
        """
        if self.missing or self.unexpected:
            return False
        return self.max_abs_error <= atol + rtol * self.reference_max_abs

    def relatively_close(self, rtol: float) -> bool:
        """True iff the relative error (the error's norm over the reference's) is below rtol; a NaN or
        infinite error never is."""
        return math.isfinite(self.relative_error) and self.relative_error < rtol

    def __str__(self) -> str:
        text = f"max abs error {self.max_abs_error:.2g}, relative error {self.relative_error:.2g}"
        if self.missing:
            text += f", missing: {', '.join(self.missing)}"
        if self.unexpected:
            text += f", unexpected: {', '.join(self.unexpected)}"
        return text


def near(value, reference: float, rtol: float = 0.0, atol: float = 0.0) -> bool:
    """Whether the number `value` lies within atol + rtol * |reference| of `reference`.

    Every comparison of a student's number with a reference goes through here. NaN and infinities
    are near only themselves (NaN to NaN, an infinity to the same infinity): a check written as
    `abs(value - reference) > tol` would let NaN pass, since every comparison with NaN is False.
    Anything but an int or a float (a bool, a string, a tensor) is near nothing."""
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (value, reference)):
        return False
    value, reference = float(value), float(reference)
    if not (math.isfinite(value) and math.isfinite(reference)):
        return (math.isnan(value) and math.isnan(reference)) or value == reference
    return abs(value - reference) <= atol + rtol * abs(reference)


def _ratio(numerator: float, denominator: float) -> float:
    if denominator == 0:
        return 0.0 if numerator == 0 else math.inf
    return numerator / denominator


def compare(
    candidate: Mapping[str, torch.Tensor | None],
    reference: Mapping[str, torch.Tensor | None],
) -> Comparison:
    """Compare two {name: tensor or None} dicts of equal keys/shapes; reference is the truth."""
    for label, value in (("candidate", candidate), ("reference", reference)):
        if not isinstance(value, Mapping):
            raise TypeError(f"{label} must be a dict of name -> tensor, got {type(value).__name__}")
    if candidate.keys() != reference.keys():
        only_candidate = sorted(set(candidate) - set(reference))
        only_reference = sorted(set(reference) - set(candidate))
        raise ValueError(
            "candidate and reference have different keys: "
            f"only in candidate {only_candidate}, only in reference {only_reference}"
        )
    squared_error = squared_reference = 0.0
    max_abs_error = reference_max_abs = 0.0
    per_tensor: dict[str, float] = {}
    per_tensor_max_abs: dict[str, float] = {}
    missing: list[str] = []
    unexpected: list[str] = []
    for name, ref in reference.items():
        cand = candidate[name]
        for label, value in (("candidate", cand), ("reference", ref)):
            if value is not None and not isinstance(value, torch.Tensor):
                raise TypeError(f"{label}[{name!r}] must be a tensor or None, got "
                                f"{type(value).__name__}")
        if cand is None and ref is None:
            per_tensor[name] = per_tensor_max_abs[name] = 0.0
            continue
        if cand is not None and ref is not None and cand.shape != ref.shape:
            raise ValueError(
                f"tensor {name!r} has shape {list(cand.shape)} in candidate but "
                f"{list(ref.shape)} in reference"
            )
        # A missing tensor counts as zeros, so the error still says how much of the signal is lost.
        if cand is None:
            missing.append(name)
            cand = torch.zeros_like(ref)
        if ref is None:
            unexpected.append(name)
            ref = torch.zeros_like(cand)
        # float64 on the CPU: exact enough to judge float32 results, and MPS has no float64.
        cand64 = cand.detach().to("cpu", torch.float64)
        ref64 = ref.detach().to("cpu", torch.float64)
        difference = cand64 - ref64
        tensor_squared_error = float(difference.square().sum())
        tensor_squared_reference = float(ref64.square().sum())
        tensor_max_abs = float(difference.abs().max()) if difference.numel() else 0.0
        per_tensor[name] = _ratio(math.sqrt(tensor_squared_error),
                                  math.sqrt(tensor_squared_reference))
        per_tensor_max_abs[name] = tensor_max_abs
        squared_error += tensor_squared_error
        squared_reference += tensor_squared_reference
        max_abs_error = max(max_abs_error, tensor_max_abs)
        if ref64.numel():
            reference_max_abs = max(reference_max_abs, float(ref64.abs().max()))
        if math.isnan(tensor_max_abs):
            max_abs_error = math.nan
    return Comparison(
        max_abs_error=max_abs_error,
        relative_error=_ratio(math.sqrt(squared_error), math.sqrt(squared_reference)),
        per_tensor=per_tensor,
        missing=tuple(missing),
        unexpected=tuple(unexpected),
        reference_max_abs=reference_max_abs,
        per_tensor_max_abs=per_tensor_max_abs,
    )


def full_batch_gradients(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
) -> dict[str, torch.Tensor | None]:
    """Return grad_snapshot of loss_fn(model(x), y) (scalar) on a clone; `model` is untouched."""
    _require_module(model)
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
    if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.dim() and y.dim():
        if len(x) != len(y):
            raise ValueError(f"x and y must have the same batch size, got {len(x)} and {len(y)}")
    clone = clone_model(model)
    loss = loss_fn(clone(x), y)
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        shape = list(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise ValueError(f"loss_fn must return a scalar tensor, got {shape}")
    loss.backward()
    return grad_snapshot(clone)


def global_grad_norm(grads: Mapping[str, torch.Tensor | None]) -> float:
    """Return the L2 norm over all non-None tensors of a {name: tensor or None} dict."""
    if not isinstance(grads, Mapping):
        raise TypeError(f"grads must be a dict of name -> tensor, got {type(grads).__name__}")
    if not grads:
        raise ValueError("grads is empty: there is no gradient to measure")
    squared = 0.0
    for name, grad in grads.items():
        if grad is None:
            continue
        if not isinstance(grad, torch.Tensor):
            raise TypeError(f"grads[{name!r}] must be a tensor or None, got {type(grad).__name__}")
        squared += float(grad.detach().to("cpu", torch.float64).square().sum())
    return math.sqrt(squared)


def fill_grads(model: nn.Module, scale: float = 1.0, seed: int = 0) -> dict[str, torch.Tensor]:
    """Set every parameter's .grad to seeded noise (std `scale`, the parameter's shape/dtype/device),
    as an earlier step would have left it; return a grad_snapshot of it."""
    generator = torch.Generator().manual_seed(seed)
    for parameter in _require_module(model).parameters():
        noise = torch.randn(parameter.shape, generator=generator, dtype=torch.float32) * scale
        parameter.grad = noise.to(device=parameter.device, dtype=parameter.dtype)
    return grad_snapshot(model)


def token_references(model: nn.Module, micro_batches, ignore_index: int = -100):
    """(full, naive, loss) for next-token micro-batches [(inputs, targets), ...] of a logits-producing
    `model` (a causal one: right-padding a sequence changes none of its logits).

    full: gradients of the mean cross-entropy over every real token of all micro-batches, from
    one forward over all sequences right-padded to a common length. naive: gradients of the mean
    of per-micro-batch means, the October 2024 bug. loss: the full-batch mean loss. The model
    itself is not touched. Lesson 02 shows the two side by side, and its Exercise 3 checks against
    them; it lives here, not with the judges in helpers/checks/ (stubbed at grading), because the
    lesson's own cells use it.
    """
    if not micro_batches:
        raise ValueError("token_references needs at least one micro-batch")
    twin = clone_model(model)
    length = max(inputs.shape[1] for inputs, _ in micro_batches)
    padded = [(F.pad(i, (0, length - i.shape[1])), F.pad(t, (0, length - t.shape[1]), value=ignore_index))
              for i, t in micro_batches]
    inputs, targets = torch.cat([i for i, _ in padded]), torch.cat([t for _, t in padded])
    loss = F.cross_entropy(twin(inputs).flatten(0, 1), targets.flatten(), ignore_index=ignore_index)
    loss.backward()
    full = grad_snapshot(twin)
    twin.zero_grad(set_to_none=True)
    for i, t in micro_batches:
        mean = F.cross_entropy(twin(i).flatten(0, 1), t.flatten(), ignore_index=ignore_index)
        (mean / len(micro_batches)).backward()
    naive = grad_snapshot(twin)
    return full, naive, loss.item()
