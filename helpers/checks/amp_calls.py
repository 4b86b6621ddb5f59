"""What lessons 01 and 02 judge alike: the GradScaler's call pattern around clipping, and the
gradients clip_grad_norm_ leaves (the reference for a clipped update)."""

from __future__ import annotations

import torch

from helpers.diagnosis import mistake
from helpers.grads import GradDict


def clip_grads(grads: GradDict, max_norm: float) -> GradDict:
    """Scale every gradient by min(1, max_norm / total norm), as clip_grad_norm_ does (same shapes)."""
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads.values()]))
    factor = min(1.0, max_norm / (float(norm) + 1e-6))
    return {name: g * factor for name, g in grads.items()}


def check_amp_calls(log, num_micro_batches: int, num_updates: int) -> None:
    """Assert the GradScaler call pattern: scale every backward's loss, then unscale_, clip, step
    and update once per optimizer update, in that order."""
    if log.count("clip_value") and not log.count("clip"):
        raise mistake(
            "clip_by_value",
            "you clipped with clip_grad_value_, which cuts each gradient entry to at most max_norm: a "
            "different gradient from clip_grad_norm_, which scales the whole gradient so that its norm is "
            "at most max_norm. Call torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)")
    scaled = log.count("scale")
    if scaled != num_micro_batches:
        raise mistake("loss_not_scaled",
                      f"scaler.scale(loss) ran {scaled} times for {num_micro_batches} "
                      "backward passes: every backward must go through scaler.scale(loss), or "
                      "the gradients are not scaled and scaler.step divides them by the scale anyway")
    clips = log.count("clip")
    if clips == num_micro_batches and num_micro_batches != num_updates:
        raise mistake("clipped_every_micro_batch",
                      f"clip_grad_norm_ ran after every micro-batch ({clips} times): clip once per "
                      "cycle, after the last backward, so it sees the complete gradient")
    once_per_update = (("unscale_", "scaler.unscale_(optimizer)", "unscale_not_once_per_update"),
                       ("scaler_step", "scaler.step(optimizer)", "scaler_step_not_once_per_update"),
                       ("update", "scaler.update()", "scaler_update_not_once_per_update"))
    for name, meaning, wrong_count in once_per_update:
        count = log.count(name)
        if count != num_updates:
            raise mistake(wrong_count,
                          f"{meaning} ran {count} times for {num_updates} optimizer updates: "
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
        raise mistake(
            "clip_before_unscale",
            "the gradients were clipped before unscale_: clipping saw gradients multiplied by the scale "
            f"{scale:g} (norm {first_clip.info['norm_seen']:.3g}), so max_norm cut them to almost nothing. "
            "Call scaler.unscale_(optimizer) before clip_grad_norm_")
    if position["update"] < position["scaler_step"]:
        raise mistake("update_before_step",
                      "scaler.update() ran before scaler.step(optimizer): step first, then update "
                      "the scale for the next iteration")
    raise mistake("wrong_call_order",
                  f"the calls ran in the order {', '.join(order[:8])}; each update should run "
                  "unscale_, clip_grad_norm_, scaler.step, scaler.update, in that order")
