"""Unit tests of helpers.checks.recompute: lesson 04's forward-pass prediction on right and wrong answers."""

import math

import numpy
import pytest
import torch

from helpers import models
from helpers.checks import recompute as cr

# (depth, blocks_per_segment, accum_steps, checkpoint_last): every case the exercise states.
CASES = [(8, 3, 3, True), (8, 2, 4, False), (6, None, 3, True), (5, 5, 2, True), (5, 5, 2, False),
         (7, 10, 3, False), (16, 4, 2, False), (9, 4, 1, False), (7, 3, 1, True)]


def right(depth, blocks_per_segment, accum_steps, checkpoint_last):
    if blocks_per_segment is None:
        return accum_steps * depth
    sizes = [min(blocks_per_segment, depth - start) for start in range(0, depth, blocks_per_segment)]
    return accum_steps * (depth + (sum(sizes) if checkpoint_last else sum(sizes[:-1])))


@pytest.mark.parametrize("case", CASES)
def test_the_count_of_a_real_update_is_what_the_arithmetic_says(case):
    assert cr.count_block_forwards(*case) == right(*case)


def test_the_count_is_of_forwards_that_start_since_early_stop_skips_the_last_addition():
    finished = []
    model = models.ResidualMLP(4, 8, 4, seed=0)
    for block in model.blocks:
        block.register_forward_hook(lambda module, args, output: finished.append(1))
    out = cr.segmented_forward(model, torch.randn(2, 4), [2, 2])
    out.pow(2).mean().backward()
    assert len(finished) < cr.count_block_forwards(4, 2, 1, True) == 8


@pytest.mark.parametrize("case", CASES)
def test_a_right_prediction_passes_every_case(case):
    cr.check_block_forwards(right, *case)


@pytest.mark.parametrize("value", [56.0, numpy.int64(56), torch.tensor(56)])
def test_a_whole_number_of_another_type_is_accepted(value):
    cr.check_block_forwards(lambda *args: value, 8, 2, 4, False)


def no_recompute(depth, blocks_per_segment, accum_steps, checkpoint_last):
    return accum_steps * depth


def one_micro_batch(depth, blocks_per_segment, accum_steps, checkpoint_last):
    return right(depth, blocks_per_segment, 1, checkpoint_last)


def full_last_segment(depth, blocks_per_segment, accum_steps, checkpoint_last):
    segments = math.ceil(depth / blocks_per_segment) - (0 if checkpoint_last else 1)
    return accum_steps * (depth + segments * blocks_per_segment)


def last_always_rerun(depth, blocks_per_segment, accum_steps, checkpoint_last):
    return right(depth, blocks_per_segment, accum_steps, True)


def last_never_rerun(depth, blocks_per_segment, accum_steps, checkpoint_last):
    return right(depth, blocks_per_segment, accum_steps, False)


def segments_not_blocks(depth, blocks_per_segment, accum_steps, checkpoint_last):
    segments = math.ceil(depth / blocks_per_segment) - (0 if checkpoint_last else 1)
    return accum_steps * (depth + segments)


@pytest.mark.parametrize(("predict", "case", "says"), [
    (no_recompute, (8, 3, 3, True), "runs its forward again during backward"),
    (one_micro_batch, (8, 3, 3, True), "each with its own forward and backward"),
    (full_last_segment, (8, 3, 3, True), "the last segment holds only the blocks that are left"),
    (last_always_rerun, (8, 2, 4, False), "the last segment runs plainly"),
    (last_never_rerun, (8, 3, 3, True), "backward reruns it too"),
    (segments_not_blocks, (8, 2, 4, False), "count blocks, not segments"),
])
def test_each_known_mistake_is_named(predict, case, says):
    with pytest.raises(AssertionError, match=says):
        cr.check_block_forwards(predict, *case)


def test_a_wrong_number_that_matches_no_mistake_names_none():
    with pytest.raises(AssertionError) as failure:
        cr.check_block_forwards(lambda *args: 1, 8, 3, 2, True)
    assert str(failure.value).endswith("you predicted 1")


def test_a_function_that_fails_on_none_is_told_what_none_means():
    def divides(depth, blocks_per_segment, accum_steps, checkpoint_last):
        return accum_steps * (depth + depth // blocks_per_segment * blocks_per_segment)

    with pytest.raises(AssertionError, match="blocks_per_segment=None means no checkpointing"):
        cr.check_block_forwards(divides, 6, None, 3, True)


class AlwaysEqual(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize("value", [AlwaysEqual(1), True, float("nan"), 56.5, "56", None])
def test_what_is_not_a_whole_number_of_a_plain_type_fails_as_not_an_int(value):
    with pytest.raises(AssertionError, match="as an int"):
        cr.check_block_forwards(lambda *args: value, 8, 2, 4, False)


def test_running_a_model_to_count_fails_although_the_count_is_right():
    def runs(depth, blocks_per_segment, accum_steps, checkpoint_last):
        models.ResidualMLP(4, 8, depth)(torch.randn(1, 4))
        return right(depth, blocks_per_segment, accum_steps, checkpoint_last)

    with pytest.raises(AssertionError, match="without running a model"):
        cr.check_block_forwards(runs, 8, 2, 4, False)


def test_the_stub_raises_not_implemented_unchanged():
    def stub(*args):
        raise NotImplementedError("write predict_block_forwards")

    with pytest.raises(NotImplementedError, match="write predict_block_forwards"):
        cr.check_block_forwards(stub, 8, 2, 4, False)
