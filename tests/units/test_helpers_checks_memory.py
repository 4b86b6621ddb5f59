"""Unit tests of helpers.checks.memory: the memory lesson's checks on right and wrong answers.

Each exercise's check gets a correct function (it passes), the classic mistakes (each fails with
the message that names it), a function that raises (the course's message, never the raw error),
and a function that warns and prints to stderr (nothing reaches stderr, and it still passes).
"""

import math
import sys
import warnings

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from helpers.checks import memory as cm
from helpers.checks.memory import plan as cm_plan
from helpers.checks.memory import saved_bytes as cm_saved
from helpers.checks.memory import training_bytes as cm_training
from helpers.models import ResidualMLP

# The models are tiny: extra intra-op threads only fight each other (3x slower on 2 cores).
pytestmark = pytest.mark.usefixtures("torch_on_one_thread")


# ---------------------------------------------------------------- exercise 1

def predict_training_bytes(model, optimizer_name):
    trained = [p for p in model.parameters() if p.requires_grad]
    size = sum(p.numel() * p.element_size() for p in trained)
    state = {"sgd": 0, "sgd_momentum": size, "adam": 2 * size + 4 * len(trained)}[optimizer_name]
    return {"parameters": sum(p.numel() * p.element_size() for p in model.parameters()),
            "gradients": size, "optimizer": state}


def frozen_bf16():
    model = nn.Sequential(nn.Linear(6, 32), nn.GELU(), nn.Linear(32, 5)).to(torch.bfloat16)
    model[0].requires_grad_(False)
    return model


def test_measure_training_bytes_counts_a_real_step_and_leaves_the_model_alone():
    model = nn.Sequential(nn.Linear(6, 16), nn.Linear(16, 3))
    measured = cm.measure_training_bytes(model, "adam")
    params = (6 * 16 + 16 + 16 * 3 + 3) * 4
    assert measured == {"parameters": params, "gradients": params, "optimizer": 2 * params + 4 * 4}
    assert all(p.grad is None for p in model.parameters())
    with pytest.raises(ValueError, match="optimizer_name"):
        cm_training.make_optimizer(model.parameters(), "adamw")


def test_check_training_bytes_passes_a_correct_prediction():
    cm.check_training_bytes(predict_training_bytes, nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16)))
    cm.check_training_bytes(predict_training_bytes, frozen_bf16(), label="bf16")


@pytest.mark.parametrize(("wrong", "model", "says"), [
    (lambda m, n: predict_training_bytes(m, "sgd_momentum" if n == "adam" else n),
     nn.Sequential(nn.Linear(6, 4)), "Adam keeps two buffers per parameter"),
    (lambda m, n: {**predict_training_bytes(m, n), "gradients": sum(p.numel() * 2 for p in m.parameters())},
     frozen_bf16(), "frozen parameters (requires_grad=False) get no gradient"),
    (lambda m, n: {**predict_training_bytes(m, n), "parameters": sum(p.numel() * 4 for p in m.parameters())},
     frozen_bf16(), "count each parameter's own element_size()"),
    (lambda m, n: (1, 2, 3), nn.Sequential(nn.Linear(6, 4)), "should return a dict with the keys"),
    (lambda m, n: sum(p.grad.numel() for p in m.parameters()), nn.Sequential(nn.Linear(6, 4)),
     "before any step p.grad is None"),
])
def test_check_training_bytes_names_the_mistake(wrong, model, says):
    with pytest.raises(AssertionError) as caught:
        cm.check_training_bytes(wrong, model)
    assert says in str(caught.value)


def test_check_training_bytes_refuses_a_prediction_that_ran_the_model():
    def runs_it(model, optimizer_name):
        model(torch.randn(2, 6)).sum().backward()
        return predict_training_bytes(model, optimizer_name)

    with pytest.raises(AssertionError, match="ran the model"):
        cm.check_training_bytes(runs_it, nn.Sequential(nn.Linear(6, 4)))


def test_an_unanswered_exercise_raises_not_implemented():
    def stub(*args):
        raise NotImplementedError("replace this line with your solution")

    with pytest.raises(NotImplementedError):
        cm.check_training_bytes(stub, nn.Sequential(nn.Linear(6, 4)))
    with pytest.raises(NotImplementedError):
        cm.check_saved_bytes(stub, [nn.Sequential(nn.Linear(6, 4))], [2])
    with pytest.raises(NotImplementedError):
        cm.check_checkpointed_forward(stub, ResidualMLP(8, 16, 2, seed=0), torch.randn(3, 8))
    with pytest.raises(NotImplementedError):
        cm.check_plan(stub, ResidualMLP(8, 16, 2, seed=0), 8, 10_000)


# ---------------------------------------------------------------- exercise 2

def predict_saved_bytes(model, batch_size):
    first = model[0]
    width = first.in_features if isinstance(first, nn.Linear) else first.normalized_shape[0]
    total, current_saved = 0, False
    for layer in model:
        size = batch_size * width * 4
        if isinstance(layer, nn.ReLU):
            total, current_saved = total + size, True
            continue
        if isinstance(layer, nn.Dropout):
            total += size
        elif not current_saved:
            total += size
        if isinstance(layer, nn.LayerNorm):
            total += 8 * batch_size
        if isinstance(layer, nn.Linear):
            width = layer.out_features
        current_saved = False
    return total


SAVED_MODELS = [
    nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)),
    nn.Sequential(nn.LayerNorm(16), nn.Linear(16, 24), nn.Dropout(0.1), nn.Linear(24, 4)),
    nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.LayerNorm(32), nn.Linear(32, 24), nn.ReLU(), nn.GELU(),
                  nn.Dropout(0.2), nn.ReLU()),
]


def test_measure_saved_bytes_matches_the_tables_count():
    # Linear saves its input, ReLU its output (shared with the next Linear): two [10, 16|32] tensors.
    assert cm_saved.measure_saved_bytes(SAVED_MODELS[0], 10) == 10 * 16 * 4 + 10 * 32 * 4


def test_check_saved_bytes_passes_a_correct_prediction():
    cm.check_saved_bytes(predict_saved_bytes, SAVED_MODELS, [10, 3])


def _without(layer_type, extra=0):
    def predict(model, batch_size):
        stripped = nn.Sequential(*(m for m in model if not isinstance(m, layer_type)))
        return predict_saved_bytes(stripped, batch_size) + extra
    return predict


def _with_weights(model, batch_size):
    weights = sum(x.weight.numel() * 4 for x in model if isinstance(x, nn.Linear))
    return predict_saved_bytes(model, batch_size) + weights


@pytest.mark.parametrize(("wrong", "model", "says"), [
    (_with_weights,
     SAVED_MODELS[0], "parameters are not activations"),
    (lambda m, b: predict_saved_bytes(m, b) + b * 32 * 4, SAVED_MODELS[0], "count it once"),
    (_without(nn.Dropout), SAVED_MODELS[1], "Dropout keeps its mask"),
    (lambda m, b: predict_saved_bytes(m, b) - 8 * b, SAVED_MODELS[1], "a float32 mean and inverse standard"),
])
def test_check_saved_bytes_names_the_mistake(wrong, model, says):
    with pytest.raises(AssertionError) as caught:
        cm.check_saved_bytes(wrong, [model], [10])
    assert says in str(caught.value)


def test_a_gap_that_two_mistakes_explain_names_neither():
    # At batch 4 the two weights of Linear(2, 2) (32 bytes) weigh as much as ReLU's [4, 2] output counted
    # twice (32 bytes): the check cannot tell which mistake it is, so it names none.
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
    right = predict_saved_bytes(model, 4)
    with pytest.raises(AssertionError) as caught:
        cm.check_saved_bytes(lambda m, b: predict_saved_bytes(m, b) + 32, [model], [4])
    assert str(caught.value).endswith(f"you predicted {right + 32}")


def test_check_saved_bytes_explains_an_attribute_error():
    def widths_of_every_layer(model, batch_size):
        return sum(batch_size * layer.in_features * 4 for layer in model)

    with pytest.raises(AssertionError, match="only Linear has in_features"):
        cm.check_saved_bytes(widths_of_every_layer, [SAVED_MODELS[0]], [10])


# ---------------------------------------------------------------- exercise 3

def checkpointed_forward(model, x, blocks_per_segment=1):
    def run(h, blocks):
        for block in blocks:
            h = block(h)
        return h

    blocks = list(model.blocks)
    for start in range(0, len(blocks), blocks_per_segment):
        x = checkpoint(run, x, blocks[start:start + blocks_per_segment], use_reentrant=False)
    return x


def x_of(rows=256, requires_grad=False):
    """An input at which activations, not gradients, set the peak: what checkpointing changes."""
    return torch.randn(rows, 8, requires_grad=requires_grad)


def last_segment_unchecked(model, x, blocks_per_segment=1):
    blocks = list(model.blocks)
    starts = list(range(0, len(blocks), blocks_per_segment))
    for start in starts[:-1]:
        x = checkpoint(nn.Sequential(*blocks[start:start + blocks_per_segment]), x, use_reentrant=False)
    return nn.Sequential(*blocks[starts[-1]:])(x)


def without_rng_state(model, x, blocks_per_segment=1):
    """Correct: the model has no randomness, so no RNG state needs keeping (5 KiB per checkpoint)."""
    blocks = list(model.blocks)
    for start in range(0, len(blocks), blocks_per_segment):
        x = checkpoint(nn.Sequential(*blocks[start:start + blocks_per_segment]), x, use_reentrant=False,
                       preserve_rng_state=False)
    return x


@pytest.mark.parametrize("function", [checkpointed_forward, last_segment_unchecked, without_rng_state])
@pytest.mark.parametrize(("depth", "per_segment", "grad"), [(4, None, False), (5, 2, True), (3, 7, True),
                                                            (7, 3, True)])
def test_check_checkpointed_forward_passes_a_correct_function(function, depth, per_segment, grad):
    cm.check_checkpointed_forward(function, ResidualMLP(8, 32, depth, seed=1), x_of(requires_grad=grad),
                                  per_segment)


def test_the_reference_peaks_are_measured_once_per_process(monkeypatch):
    """Every student of a class is judged against the same reference peaks, measured once: a model
    of another seed and a new input of the same shape reuse them; another segment length does not."""
    from helpers.checks.memory import checkpoint_segments

    measured = []
    real = checkpoint_segments.forward_backward_peak
    monkeypatch.setattr(checkpoint_segments, "forward_backward_peak",
                        lambda forward, model, x: measured.append(1) or real(forward, model, x))
    checkpoint_segments._reference_peak.kept_results.clear()
    cm.check_checkpointed_forward(checkpointed_forward, ResidualMLP(8, 32, 5, seed=1), x_of(), 2)
    assert measured == [1]
    cm.check_checkpointed_forward(checkpointed_forward, ResidualMLP(8, 32, 5, seed=7), x_of(), 2)
    assert measured == [1]
    cm.check_checkpointed_forward(checkpointed_forward, ResidualMLP(8, 32, 5, seed=7), x_of(), 3)
    assert measured == [1, 1]


@pytest.mark.parametrize("per_segment", [3, 7])
def test_the_only_segment_may_stay_unchecked(per_segment):
    """The spec lets the last segment run unchecked, the only one too (blocks_per_segment at least the
    depth): then nothing is checkpointed, which peaks no higher than one checkpoint. With more than
    one segment, no checkpoint at all is still a mistake."""
    model = ResidualMLP(8, 32, 3, seed=1)
    cm.check_checkpointed_forward(no_checkpoint, model, x_of(requires_grad=True), per_segment)
    with pytest.raises(AssertionError, match="no block ran inside a checkpoint"):
        cm.check_checkpointed_forward(no_checkpoint, model, x_of(requires_grad=True), 1)


def one_segment(model, x, blocks_per_segment=1):
    return checkpoint(model, x, use_reentrant=False)


def each_block(model, x, blocks_per_segment=1):
    for block in model.blocks:
        x = checkpoint(block, x, use_reentrant=False)
    return x


def reentrant(model, x, blocks_per_segment=1):
    for block in model.blocks:
        x = checkpoint(block, x, use_reentrant=True)
    return x


def reentrant_default(model, x, blocks_per_segment=1):
    for block in model.blocks:
        x = checkpoint(block, x)
    return x


def drops_the_remainder(model, x, blocks_per_segment=1):
    blocks = list(model.blocks)
    for index in range(len(blocks) // blocks_per_segment):
        x = checkpoint(nn.Sequential(*blocks[index * blocks_per_segment:(index + 1) * blocks_per_segment]), x,
                       use_reentrant=False)
    return x


def no_checkpoint(model, x, blocks_per_segment=1):
    return model(x)


def sequential_of_as_many_segments(model, x, blocks_per_segment=1):
    segments = math.ceil(len(model.blocks) / blocks_per_segment)
    return checkpoint_sequential(nn.Sequential(*model.blocks), segments, x, use_reentrant=False)


def shorter_segment_first(model, x, blocks_per_segment=1):
    blocks = list(model.blocks)
    start = len(blocks) % blocks_per_segment
    if start:
        x = checkpoint(nn.Sequential(*blocks[:start]), x, use_reentrant=False)
    for first in range(start, len(blocks), blocks_per_segment):
        x = checkpoint(nn.Sequential(*blocks[first:first + blocks_per_segment]), x, use_reentrant=False)
    return x


def detaches(model, x, blocks_per_segment=1):
    return checkpointed_forward(model, x.detach(), blocks_per_segment)


def lambda_in_a_loop(model, x, blocks_per_segment=1):
    blocks = list(model.blocks)
    for start in range(0, len(blocks), blocks_per_segment):
        # the mistake under test: the lambda runs again in backward, after the loop has moved on
        x = checkpoint(lambda h: nn.Sequential(*blocks[start:start + blocks_per_segment])(h), x,  # noqa: B023
                       use_reentrant=False)
    return x


def cuts_the_graph(model, x, blocks_per_segment=1):
    blocks = list(model.blocks)
    for start in range(0, len(blocks), blocks_per_segment):
        segment = nn.Sequential(*blocks[start:start + blocks_per_segment])
        x = checkpoint(segment, x.detach(), use_reentrant=False)
    return x


def passes_a_list(model, x, blocks_per_segment=1):
    return checkpoint(list(model.blocks), x, use_reentrant=False)


@pytest.mark.parametrize(("wrong", "depth", "per_segment", "grad", "says"), [
    (one_segment, 4, None, False, "you checkpointed the whole model as one segment"),
    (each_block, 4, 2, False, "every block got its own checkpoint"),
    (each_block, 7, 3, False, "every block got its own checkpoint"),
    (no_checkpoint, 4, 2, False, "no block ran inside a checkpoint"),
    (sequential_of_as_many_segments, 5, 2, False, "its segments are not blocks_per_segment long"),
    (shorter_segment_first, 7, 2, False, "the segment that is shorter goes last"),
    (reentrant, 4, 2, False, "pass use_reentrant=False"),
    (reentrant_default, 4, 2, False, "checkpoint warned about use_reentrant"),
    (drops_the_remainder, 5, 2, False, "the last, shorter segment"),
    (detaches, 4, 2, True, "the gradient of the input x differs"),
    (passes_a_list, 4, 2, False, "checkpoint's first argument is the function to run"),
    (lambda_in_a_loop, 4, 2, False, "a lambda or closure written in a loop"),
    (cuts_the_graph, 4, 2, False, "the graph was cut between segments"),
])
def test_check_checkpointed_forward_names_the_mistake(wrong, depth, per_segment, grad, says):
    with pytest.raises(AssertionError) as caught:
        cm.check_checkpointed_forward(wrong, ResidualMLP(8, 32, depth, seed=2), x_of(requires_grad=grad),
                                      per_segment)
    assert says in str(caught.value)


def test_the_peak_sees_what_a_function_keeps_alive_not_how_it_calls_checkpoint():
    """Keeping each segment's output costs nothing (checkpoint saves them anyway): it passes.
    Keeping the blocks' insides as they are recomputed holds them through backward: the
    checkpointing and the gradients are right, and the peak fails with the numbers."""
    kept = []

    def keeps_every_segment_output(model, x, blocks_per_segment=1):
        blocks, h = list(model.blocks), x
        for start in range(0, len(blocks), blocks_per_segment):
            h = checkpoint(nn.Sequential(*blocks[start:start + blocks_per_segment]), h, use_reentrant=False)
            kept.append(h)
        return h

    cm.check_checkpointed_forward(keeps_every_segment_output, ResidualMLP(8, 32, 6, seed=2), x_of(), 2)
    kept_inner = []

    def keeps_what_the_blocks_make(model, x, blocks_per_segment=1):
        def run(h, blocks):
            for block in blocks:
                h = block(h)
                kept_inner.append(h)       # the recomputed insides, alive after backward needed them
            return h

        blocks = list(model.blocks)
        for start in range(0, len(blocks), blocks_per_segment):
            x = checkpoint(run, x, blocks[start:start + blocks_per_segment], use_reentrant=False)
        return x

    with pytest.raises(AssertionError, match="forward and backward peaked at"):
        cm.check_checkpointed_forward(keeps_what_the_blocks_make, ResidualMLP(8, 32, 6, seed=2), x_of(), 2)


def test_a_detached_output_is_not_blamed_on_reentrant_checkpointing():
    def under_no_grad(model, x, blocks_per_segment=1):
        with torch.no_grad():
            return model(x)

    with pytest.raises(AssertionError) as caught:
        cm.check_checkpointed_forward(under_no_grad, ResidualMLP(8, 16, 2, seed=3), torch.randn(3, 8), 1)
    assert "no torch.no_grad()" in str(caught.value) and "reentrant" not in str(caught.value)


# ---------------------------------------------------------------- exercise 4

def plan_micro_batches(effective_batch, budget_bytes, measure):
    for micro_batch in range(effective_batch, 0, -1):
        if effective_batch % micro_batch:
            continue
        for checkpointing in (False, True):
            if measure(micro_batch, checkpointing) <= budget_bytes:
                return {"micro_batch": micro_batch, "accum_steps": effective_batch // micro_batch,
                        "checkpointing": checkpointing}
    raise ValueError("nothing fits")


def plain_first(effective_batch, budget_bytes, measure):
    """The old convention: exhaust the plain micro-batches before checkpointing any."""
    divisors = [m for m in range(effective_batch, 0, -1) if effective_batch % m == 0]
    for checkpointing in (False, True):
        for micro_batch in divisors:
            if measure(micro_batch, checkpointing) <= budget_bytes:
                return {"micro_batch": micro_batch, "accum_steps": effective_batch // micro_batch,
                        "checkpointing": checkpointing}
    raise ValueError("nothing fits")


PLAN_MODEL = ResidualMLP(8, 32, 3, seed=4)
MEASURE = cm.PeakMeasure(PLAN_MODEL).bytes


def test_peak_measure_grows_with_the_micro_batch_and_records_calls():
    measure = cm.PeakMeasure(PLAN_MODEL)
    assert measure(1, False) < measure(4, False) < measure(16, False)
    assert measure(4, False) == measure(4, False)
    # Gradients exist before a measured micro-batch: the measure leaves none behind.
    assert all(p.grad is None for p in PLAN_MODEL.parameters())
    # At a small micro-batch gradients' temporaries dominate and the recompute only adds; at a large
    # one the activations dominate and checkpointing every block lowers the peak.
    assert measure(1, True) > measure(1, False) and measure(64, True) < measure(64, False)
    assert measure(0, True) == 0 and cm_plan._odd_sizes(measure.calls) == [0]


def test_a_structure_is_measured_once_per_process_whatever_its_weights(monkeypatch):
    """The grader judges a whole class on the same few models: each (micro-batch, checkpointing)
    of a structure is measured once, for a model of another seed too, and again only when what
    the peak depends on changes (depth, a frozen block, eval mode)."""
    from helpers.collect import memory as collect_memory

    runs = []
    real = collect_memory.peak_bytes
    monkeypatch.setattr(collect_memory, "peak_bytes", lambda fn, device: runs.append(1) or real(fn, device))
    monkeypatch.setattr(collect_memory, "_PEAKS", {})
    first = cm.PeakMeasure(ResidualMLP(8, 32, 3, seed=50)).bytes(6, True)
    assert len(runs) == 2                                    # the smaller of two runs
    assert cm.PeakMeasure(ResidualMLP(8, 32, 3, seed=51)).bytes(6, True) == first and len(runs) == 2
    # The same number as a measure that starts from nothing (the allocations are the same every time).
    monkeypatch.setattr(collect_memory, "_PEAKS", {})
    assert cm.PeakMeasure(ResidualMLP(8, 32, 3, seed=52)).bytes(6, True) == first and len(runs) == 4
    frozen = ResidualMLP(8, 32, 3, seed=50)
    frozen.blocks[0].requires_grad_(False)
    for changed in (ResidualMLP(8, 32, 4, seed=50), frozen, ResidualMLP(8, 32, 3, seed=50).eval()):
        before = len(runs)
        cm.PeakMeasure(changed).bytes(6, True)
        assert len(runs) == before + 2, changed
    assert cm.PeakMeasure(ResidualMLP(8, 32, 4, seed=9)).bytes(6, True) != first


def test_the_students_measure_answers_what_the_grader_measured(monkeypatch):
    """check_plan hands the student's plan a measure that knows the grader's peaks (the kernel
    need not measure them again); it still measures what it was not told, and travels whole."""
    from helpers.collect import memory as collect_memory
    from helpers.transport import wire

    told = cm.PeakMeasure(PLAN_MODEL, known={(6, True): 123})
    tree, buffers = wire.encode(told, objects=True)
    arrived = wire.decode(tree, buffers, objects=True)
    assert arrived.known == {(6, True): 123} and arrived(6, True) == 123 and arrived.calls == [(6, True)]
    monkeypatch.setattr(collect_memory, "_PEAKS", {})
    assert arrived(5, False) == MEASURE(5, False) != 123
    table = cm_plan._PeakTable(PLAN_MODEL)
    table.best_plan(16, MEASURE(4, False))
    assert set(table.student_measure().known) >= {(16, False), (16, True), (8, False), (8, True), (4, False)}


@pytest.mark.parametrize(("batch", "budget", "plan"), [
    (16, MEASURE(4, False), {"micro_batch": 4, "accum_steps": 4, "checkpointing": False}),
    (64, MEASURE(64, True), {"micro_batch": 64, "accum_steps": 1, "checkpointing": True}),
    (64, MEASURE(32, True), {"micro_batch": 32, "accum_steps": 2, "checkpointing": True}),
])
def test_check_plan_passes_the_plan_with_the_largest_micro_batch(batch, budget, plan):
    assert cm.check_plan(plan_micro_batches, PLAN_MODEL, batch, budget) == plan


def halves(effective_batch, budget_bytes, measure):
    m = effective_batch
    while m > 1 and measure(m, False) > budget_bytes:
        m //= 2
    return {"micro_batch": m, "accum_steps": effective_batch // m, "checkpointing": False}


@pytest.mark.parametrize(("wrong", "batch", "budget", "says"), [
    (lambda b, budget, measure: {"micro_batch": 4, "accum_steps": 1, "checkpointing": False}, 12,
     MEASURE(4, False), "never by shrinking the effective batch"),
    (lambda b, budget, measure: {"micro_batch": 4, "accum_steps": b / 4, "checkpointing": False}, 12,
     MEASURE(4, False), "use effective_batch // micro_batch"),
    (lambda b, budget, measure: {"micro_batch": 12, "accum_steps": 1, "checkpointing": False}, 12,
     MEASURE(4, False), "over the budget"),
    (lambda b, budget, measure: {"micro_batch": 4, "accum_steps": 3, "checkpointing": True}, 12,
     MEASURE(4, True), "uses checkpointing, but micro-batch 4 fits without it"),
    (halves, 12, MEASURE(4, False), "take the largest"),
    (lambda b, budget, measure: plan_micro_batches(b, budget - 1, measure), 12, MEASURE(4, False),
     "exactly the budget of"),
    (plain_first, 64, MEASURE(64, True), "checkpointing when that is what lets it fit"),
    (lambda b, budget, measure: (4, 3, False), 12, MEASURE(4, False), "should return a dict with the keys"),
    (lambda b, budget, measure: plan_micro_batches(b, budget, lambda m, c: measure(m)), 12, MEASURE(4, False),
     "call measure(micro_batch, checkpointing) with both arguments"),
    (lambda b, budget, measure: b // min(m for m in range(0, b) if measure(m, False) <= budget), 12,
     MEASURE(4, False), "you tried micro-batches of [0]"),
    (lambda b, budget, measure: max(m for m in range(1, b + 1) if b % m == 0 and measure(m, True) <= budget),
     12, MEASURE(4, False), "but a plan fits: micro-batch 4 without checkpointing"),
])
def test_check_plan_names_the_mistake(wrong, batch, budget, says):
    with pytest.raises(AssertionError) as caught:
        cm.check_plan(wrong, PLAN_MODEL, batch, budget)
    assert says in str(caught.value)


def strictly_below(effective_batch, budget_bytes, measure):
    """Turns down a plan whose peak is exactly the budget: measure(m, c) < budget_bytes."""
    return plan_micro_batches(effective_batch, budget_bytes - 1, measure)


def test_a_plain_peak_of_exactly_the_budget_turned_down_for_checkpointing_is_named():
    """32 plain peaks at exactly the budget, so `<` takes 32 checkpointed instead (below it)."""
    assert MEASURE(32, True) < MEASURE(32, False)
    with pytest.raises(AssertionError) as caught:
        cm.check_plan(strictly_below, PLAN_MODEL, 32, MEASURE(32, False))
    assert caught.value.mistake == "budget_boundary_excluded"
    assert f"({MEASURE(32, False)} bytes) is exactly the budget" in str(caught.value)
    assert "measure(m, c) <= budget_bytes" in str(caught.value)


def checkpointing_first(effective_batch, budget_bytes, measure):
    """Tries checkpointing before the plain run at each micro-batch: never measures the plain peak."""
    for micro_batch in [m for m in range(effective_batch, 0, -1) if effective_batch % m == 0]:
        for checkpointing in (True, False):
            if measure(micro_batch, checkpointing) <= budget_bytes:
                return {"micro_batch": micro_batch, "accum_steps": effective_batch // micro_batch,
                        "checkpointing": checkpointing}
    raise ValueError("nothing fits")


def test_checkpointing_tried_first_is_not_called_a_boundary_mistake():
    """The same plan as `<` gives (32 checkpointed, the plain peak exactly the budget), but this
    plan never measured the plain peak: its mistake is preferring checkpointing, and the feedback
    must not tell it about a comparison it did not make."""
    with pytest.raises(AssertionError) as caught:
        cm.check_plan(checkpointing_first, PLAN_MODEL, 32, MEASURE(32, False))
    assert caught.value.mistake == "needless_checkpointing"
    assert "checkpointing costs an extra forward" in str(caught.value)
    assert "exactly the budget" not in str(caught.value)


@pytest.mark.parametrize("checkpointing", [0, 1, None, "False"])
def test_checkpointing_must_be_a_bool(checkpointing):
    def not_a_bool(effective_batch, budget_bytes, measure):
        return {**plan_micro_batches(effective_batch, budget_bytes, measure), "checkpointing": checkpointing}

    with pytest.raises(AssertionError, match="checkpointing should be a bool") as caught:
        cm.check_plan(not_a_bool, PLAN_MODEL, 12, MEASURE(4, False))
    assert caught.value.mistake == "checkpointing_not_bool"


def test_check_plan_raises_wants_a_value_error():
    cm.check_plan_raises(plan_micro_batches, PLAN_MODEL, 12, 10)
    with pytest.raises(AssertionError, match="nothing fits: raise ValueError"):
        cm.check_plan_raises(lambda *args: None, PLAN_MODEL, 12, 10)
    with pytest.raises(AssertionError, match="not StopIteration"):
        cm.check_plan_raises(lambda b, budget, measure: next(iter([])), PLAN_MODEL, 12, 10)


# ---------------------------------------------------------------- stderr

def _noisy(function):
    def wrapper(*args, **kwargs):
        warnings.warn("a harmless note from the student's code", UserWarning, stacklevel=2)
        print("debug output on stderr", file=sys.stderr)
        return function(*args, **kwargs)
    return wrapper


def test_a_student_function_that_warns_and_prints_to_stderr_writes_nothing_to_stderr(capsys):
    cm.check_training_bytes(_noisy(predict_training_bytes), nn.Sequential(nn.Linear(6, 4)))
    cm.check_saved_bytes(_noisy(predict_saved_bytes), SAVED_MODELS[:1], [4])
    cm.check_checkpointed_forward(_noisy(checkpointed_forward), ResidualMLP(8, 32, 2, seed=5), x_of(), 1)
    cm.check_plan(_noisy(plan_micro_batches), PLAN_MODEL, 12, MEASURE(4, False))
    cm.check_plan_raises(_noisy(plan_micro_batches), PLAN_MODEL, 12, 10)
    out, err = capsys.readouterr()
    assert err == ""
    assert "debug output on stderr" in out and "a harmless note" in out


def test_divisors():
    assert cm_plan._divisors(12) == [1, 2, 3, 4, 6, 12]
    assert math.prod(cm_plan._divisors(1)) == 1


def test_a_prediction_that_trains_a_copy_of_the_model_ran_something():
    import copy

    def measures_a_copy(model, optimizer_name):
        twin = copy.deepcopy(model)
        optimizer = cm_training.make_optimizer(twin.parameters(), optimizer_name)
        twin(torch.randn(2, 6)).pow(2).mean().backward()
        optimizer.step()
        return cm.measure_training_bytes(model, optimizer_name)

    with pytest.raises(AssertionError, match="ran the model"):
        cm.check_training_bytes(measures_a_copy, nn.Sequential(nn.Linear(6, 4), nn.Linear(4, 2)), ("adam",))
