"""Reference and diagnoses for lesson 04's prediction of the forward passes per update (Exercise 6).

The check chooses the configuration, has the student's prediction made by
helpers.collect.recompute, then trains a real ResidualMLP here for one update, checkpointed as the
configuration says, counts every block forward that starts (in the forward pass and in backward's
recomputation) and names the mistake whose count the student's matches.

At grading this module is replaced by a stub inside the sandbox, as every module of helpers/checks/ is.
"""

from __future__ import annotations

import math

import torch

from helpers.checks.memory.checkpoint_segments import segment_sizes, segmented_forward
from helpers.collect.recompute import collect_block_forwards
from helpers.diagnosis import mistake
from helpers.models import ResidualMLP
from helpers.transport import errors, remote


def _checkpointed_sizes(depth: int, blocks_per_segment: int | None, checkpoint_last: bool) -> list[int]:
    """The sizes of the segments that run inside a checkpoint."""
    if blocks_per_segment is None:
        return []
    sizes = segment_sizes(depth, blocks_per_segment)
    return sizes if checkpoint_last else sizes[:-1]


def count_block_forwards(depth: int, blocks_per_segment: int | None, accum_steps: int,
                         checkpoint_last: bool) -> int:
    """The block forwards that start during one update of `accum_steps` micro-batches of a real
    ResidualMLP(4, 8, depth), counted by forward pre-hooks. Segments of `blocks_per_segment` blocks
    run checkpointed (the last one only if `checkpoint_last`); None runs no checkpoint.

    A pre-hook counts a block when it starts: PyTorch's non-reentrant checkpoint stops a
    recomputation once it has rebuilt the last tensor backward needs, before the segment's last
    residual addition, so a count of finished forwards would be lower."""
    model = ResidualMLP(4, 8, depth, seed=0)
    started = 0

    def count(module, args):
        nonlocal started
        started += 1

    handles = [block.register_forward_pre_hook(count) for block in model.blocks]
    sizes = segment_sizes(depth, blocks_per_segment or depth)
    for _ in range(accum_steps):
        x = torch.randn(2, 4)
        if blocks_per_segment is None:
            out = model(x)
        else:
            out = segmented_forward(model, x, sizes, last_checkpointed=checkpoint_last)
        out.pow(2).mean().backward()
    for handle in handles:
        handle.remove()
    return started


def _mistakes(depth: int, blocks_per_segment: int | None, accum_steps: int,
              checkpoint_last: bool) -> dict[str, int]:
    """What each known wrong way of counting predicts: diagnoses only, never the reference."""
    rerun = sum(_checkpointed_sizes(depth, blocks_per_segment, checkpoint_last))
    segments = len(_checkpointed_sizes(depth, blocks_per_segment, checkpoint_last))
    mistakes = {
        "no_recompute": accum_steps * depth,
        "one_micro_batch": depth + rerun,
        "segments_not_blocks": accum_steps * (depth + segments),
        "last_rerun_too": accum_steps * (depth + sum(_checkpointed_sizes(depth, blocks_per_segment, True))),
        "last_never_rerun": accum_steps * (depth + sum(_checkpointed_sizes(depth, blocks_per_segment,
                                                                           False))),
    }
    if blocks_per_segment is not None:
        full = min(blocks_per_segment, depth)
        whole_segments = math.ceil(depth / full) if checkpoint_last else math.ceil(depth / full) - 1
        mistakes["last_segment_full"] = accum_steps * (depth + whole_segments * full)
    return mistakes


MISTAKES = {
    "no_recompute": "a checkpointed segment runs its forward again during backward, so its blocks start "
                    "twice per micro-batch",
    "one_micro_batch": "one update runs accum_steps micro-batches, each with its own forward and backward",
    "segments_not_blocks": "count blocks, not segments: backward's recomputation reruns every block of "
                           "a checkpointed segment",
    "last_rerun_too": "with checkpoint_last=False the last segment runs plainly: its tensors are saved, so "
                      "backward has nothing of it to recompute",
    "last_never_rerun": "with checkpoint_last=True the last segment is checkpointed like the others, and "
                        "backward reruns it too",
    "last_segment_full": "the last segment holds only the blocks that are left (depth minus the full "
                         "segments before it), which can be fewer than blocks_per_segment",
}
# The name each of those mistakes goes by in a class report (helpers.diagnosis.mistake).
MISTAKE_NAMES = {
    "no_recompute": "recompute_not_counted",
    "one_micro_batch": "one_micro_batch_counted",
    "segments_not_blocks": "segments_counted_not_blocks",
    "last_rerun_too": "unchecked_last_segment_rerun",
    "last_never_rerun": "checked_last_segment_not_rerun",
    "last_segment_full": "last_segment_counted_full",
}


def check_block_forwards(predict, depth: int, blocks_per_segment: int | None, accum_steps: int,
                         checkpoint_last: bool) -> None:
    """predict(depth, blocks_per_segment, accum_steps, checkpoint_last) must equal the block forwards
    that one real update starts, and run no module while it predicts."""
    case = (f"depth={depth}, blocks_per_segment={blocks_per_segment}, accum_steps={accum_steps}, "
            f"checkpoint_last={checkpoint_last}")
    outcome = remote.run_student(predict, collect_block_forwards, depth, blocks_per_segment, accum_steps,
                                 checkpoint_last)
    error = remote.raised_of(outcome)
    if error is not None:
        advice = ("blocks_per_segment=None means no checkpointing: every block runs once per micro-batch"
                  if blocks_per_segment is None and error.type == "TypeError" else "")
        raise errors.failure("predict_block_forwards", error, advice=advice, cause="none_segment_not_handled",
                             expected=f"predicts the block forwards of one update for {case}")
    forwards = outcome.get("module_forwards")
    if type(forwards) is not int:
        raise mistake("evidence_unreadable",
                      "the check could not count the module forwards your prediction ran")
    if forwards != 0:
        raise mistake(
            "ran_model_to_predict",
            f"predict_block_forwards ran {forwards} module forwards: predict the count from the four numbers "
            "with arithmetic, without running a model")
    got = outcome.get("count")
    if not isinstance(got, int):
        raise mistake(
            "wrong_return_type",
            f"predict_block_forwards should return the number of block forwards as an int, "
            f"got {outcome.get('shown', 'nothing')}")
    want = count_block_forwards(depth, blocks_per_segment, accum_steps, checkpoint_last)
    if got == want:
        return
    named = [name for name, value in _mistakes(depth, blocks_per_segment, accum_steps,
                                              checkpoint_last).items() if value == got]
    raise mistake(
        MISTAKE_NAMES[named[0]] if len(named) == 1 else "wrong_prediction",
        f"with {case}, one update starts {want} block forwards, you predicted {got}"
        + (f": {MISTAKES[named[0]]}" if len(named) == 1 else ""))
