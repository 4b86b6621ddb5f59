"""Exercise 3 of lesson 04: a forward in checkpointed segments of blocks_per_segment blocks.

check_checkpointed_forward judges the student's checkpointed_forward by its output, its gradients and
its peak over forward and backward, measured against the ways of checkpointing the exercise knows:
the accepted ones (segmented_forward) and the known wrong ones, whose peaks name the mistake.
segment_sizes and segmented_forward are also helpers.checks.recompute's (Exercise 6).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from helpers.checks.kept import kept, key_of
from helpers.checks.memory.shared import _bytes
from helpers.collect.memory import collect_checkpointed_forward, fresh_run_peak, peak_structure
from helpers.diagnosis import mistake
from helpers.grads import clone_model, compare, grad_snapshot, near
from helpers.transport import errors, remote

# Checkpointing recomputes the same operations in the same order: the gradients match to rounding.
RTOL, ATOL = 1e-5, 1e-7


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
    """The peak bytes of forward(model, x) and the backward of its mean square, on fresh copies of
    `model` and x, as the collector measures the student's function: the smaller of two runs, as
    the student's peak is (collect_checkpointed_forward)."""
    return min(fresh_run_peak(forward, model, x), fresh_run_peak(forward, model, x))


def _reference_key(name: str, ways: dict, model: nn.Module, x: torch.Tensor, segment: int) -> tuple:
    # What a way's peak depends on: never the weights' or the input's values.
    return (name, segment, key_of(peak_structure(model)), tuple(x.shape), str(x.dtype), x.requires_grad)


@kept(key=_reference_key)
def _reference_peak(name: str, ways: dict[str, Callable], model: nn.Module, x: torch.Tensor,
                    segment: int) -> int:
    """The peak of one way of checkpointing, the same for every check and every student of a class:
    measured once per process (helpers.checks.kept)."""
    return forward_backward_peak(ways[name], model, x)


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
        raise errors.failure("checkpointed_forward", error, advice=hint,
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
        peaks[name] = _reference_peak(name, ways, model, x, segment)
        if near(peak, peaks[name], atol=tolerance):
            return
    for name in ways:  # a failure: the mistakes' peaks name the one it matches
        if name not in peaks:
            peaks[name] = _reference_peak(name, ways, model, x, segment)
    sizes = segment_sizes(depth, segment)
    cause, hint = _peak_hint(peak, peaks, tolerance)
    raise mistake(
        cause,
        f"with {depth} blocks and {called}, forward and backward peaked at {peak} bytes; "
        f"{len(sizes)} checkpointed segments of {segment} ({'+'.join(map(str, sizes))} blocks) peak at "
        f"{peaks['segments']} bytes: their saved inputs plus one segment's recomputed insides"
        + hint)
