"""Unit tests of helpers.checks.accumulation: reference runs and the diagnoses of accumulation mistakes.

Each test runs a small hand-written training loop (a correct one or one with a classic mistake)
under helpers.spies.record and checks what helpers.checks.accumulation makes of it.
"""

import pytest
import torch
import torch.nn.functional as F

from helpers.checks import accumulation as checks_accumulation
from helpers.checks.accumulation.activations import check_graphs_alive
from helpers.checks.accumulation.reference import CycleReference, Reference, reference_run
from helpers.checks.accumulation.shared import prefixed, returned_tensors, student_error
from helpers.checks.accumulation.tokens import check_token_gradients
from helpers.checks.accumulation.updates import check_updates
from helpers.checks.amp_calls import check_amp_calls
from helpers.checks.call_logs import call_log
from helpers.data import lm_batch, make_blobs, make_token_sequences, split_by_sizes, split_micro_batches
from helpers.grads import (
    clone_model,
    compare,
    fill_grads,
    full_batch_gradients,
    global_grad_norm,
    grad_snapshot,
    param_snapshot,
    token_references,
)
from helpers.models import MLP, TinyLM
from helpers.spies import record
from helpers.transport.remote import Raised, called, raised_of

LR = 0.5
K = 4


# The models are tiny: extra intra-op threads only fight each other (3x slower on 2 cores).
pytestmark = pytest.mark.usefixtures("torch_on_one_thread")


def close(candidate, reference) -> bool:
    return compare(candidate, reference).close(rtol=1e-4, atol=1e-6)


def cycles_of(batches, accum_steps):
    return [batches[i:i + accum_steps] for i in range(0, len(batches), accum_steps)]


def equal_batches(count=8):
    """`count` micro-batches of 8 samples each."""
    return split_micro_batches(*make_blobs(8 * count, 6, 3, seed=12), micro_batch_size=8)


def sized_batches(sizes):
    x, y = make_blobs(sum(sizes), 6, 3, seed=21)
    return split_by_sizes(x, y, sizes)


def run(loop, batches, accum_steps=K, *, lr=LR, seed=11, max_norm=None):
    """Reference first (from the untouched model), then the recorded student loop."""
    model = MLP(6, 8, 3, seed=seed)
    cycles = cycles_of(batches, accum_steps)
    reference = reference_run(model, F.cross_entropy, cycles, lr=lr, max_norm=max_norm,
                              accum_steps=accum_steps)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    with record(model=model, optimizer=optimizer) as log:
        losses = loop(model, optimizer, batches, accum_steps)
    return log, reference, [len(c) for c in cycles], losses, model


# ---------------------------------------------------------------------------------------------
# Training loops: one correct, then one per classic mistake.
# ---------------------------------------------------------------------------------------------

def correct_loop(model, optimizer, batches, accum_steps):
    """Weights each micro-batch by its share of its cycle's samples; steps every (short) cycle."""
    losses = []
    for cycle in cycles_of(batches, accum_steps):
        optimizer.zero_grad(set_to_none=True)
        samples = sum(len(x) for x, _ in cycle)
        cycle_loss = 0.0
        for x, y in cycle:
            loss = F.cross_entropy(model(x), y) * (len(x) / samples)
            loss.backward()
            cycle_loss += loss.item()
        optimizer.step()
        losses.append(cycle_loss)
    return losses


def step_every_micro_batch(model, optimizer, batches, accum_steps):
    losses = []
    for index, (x, y) in enumerate(batches):
        if index % accum_steps == 0:
            optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y) / accum_steps
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def drops_trailing_cycle(model, optimizer, batches, accum_steps):
    losses = []
    for index, (x, y) in enumerate(batches):
        if index % accum_steps == 0:
            optimizer.zero_grad()
            cycle_loss = 0.0
        loss = F.cross_entropy(model(x), y) / accum_steps
        loss.backward()
        cycle_loss += loss.item()
        if (index + 1) % accum_steps == 0:
            optimizer.step()
            losses.append(cycle_loss)
    return losses


def zero_grad_every_micro_batch(model, optimizer, batches, accum_steps):
    losses = []
    for index, (x, y) in enumerate(batches):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y) / accum_steps
        loss.backward()
        if (index + 1) % accum_steps == 0:
            optimizer.step()
            losses.append(loss.item())
    return losses


def no_division(model, optimizer, batches, accum_steps):
    losses = []
    for cycle in cycles_of(batches, accum_steps):
        optimizer.zero_grad()
        cycle_loss = 0.0
        for x, y in cycle:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            cycle_loss += loss.item()
        optimizer.step()
        losses.append(cycle_loss / len(cycle))
    return losses


def equal_weights(model, optimizer, batches, accum_steps):
    losses = []
    for cycle in cycles_of(batches, accum_steps):
        optimizer.zero_grad()
        cycle_loss = 0.0
        for x, y in cycle:
            loss = F.cross_entropy(model(x), y) / len(cycle)
            loss.backward()
            cycle_loss += loss.item()
        optimizer.step()
        losses.append(cycle_loss)
    return losses


def divides_short_cycle_by_accum_steps(model, optimizer, batches, accum_steps):
    losses = []
    for index, (x, y) in enumerate(batches):
        if index % accum_steps == 0:
            optimizer.zero_grad()
            cycle_loss = 0.0
        loss = F.cross_entropy(model(x), y) / accum_steps
        loss.backward()
        cycle_loss += loss.item()
        if (index + 1) % accum_steps == 0 or index + 1 == len(batches):
            optimizer.step()
            losses.append(cycle_loss)
    return losses


def returns_unscaled_losses(model, optimizer, batches, accum_steps):
    losses = []
    for cycle in cycles_of(batches, accum_steps):
        optimizer.zero_grad()
        cycle_loss = 0.0
        for x, y in cycle:
            loss = F.cross_entropy(model(x), y)
            (loss / len(cycle)).backward()
            cycle_loss += loss.item()  # forgot the 1/len(cycle): 4x the cycle's mean loss
        optimizer.step()
        losses.append(cycle_loss)
    return losses


def one_backward_per_cycle(model, optimizer, batches, accum_steps):
    losses = []
    for cycle in cycles_of(batches, accum_steps):
        optimizer.zero_grad()
        loss = sum(F.cross_entropy(model(x), y) for x, y in cycle) / len(cycle)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def steps_twice_per_cycle(model, optimizer, batches, accum_steps):
    for cycle in cycles_of(batches, accum_steps):
        optimizer.zero_grad()
        for x, y in cycle:
            (F.cross_entropy(model(x), y) / len(cycle)).backward()
        optimizer.step()
        optimizer.step()


def clears_before_step(model, optimizer, batches, accum_steps):
    for cycle in cycles_of(batches, accum_steps):
        for x, y in cycle:
            (F.cross_entropy(model(x), y) / len(cycle)).backward()
        optimizer.zero_grad(set_to_none=True)
        optimizer.step()


def clips_every_micro_batch(model, optimizer, batches, accum_steps):
    for cycle in cycles_of(batches, accum_steps):
        optimizer.zero_grad()
        for x, y in cycle:
            (F.cross_entropy(model(x), y) / accum_steps).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        optimizer.step()


# ---------------------------------------------------------------------------------------------
# reference_run
# ---------------------------------------------------------------------------------------------

def test_reference_run_does_not_touch_the_model():
    model = MLP(6, 8, 3, seed=1)
    for parameter in model.parameters():
        parameter.grad = torch.full_like(parameter, 7.0)
    params_before, grads_before = param_snapshot(model), grad_snapshot(model)
    reference_run(model, F.cross_entropy, cycles_of(equal_batches(), K), lr=LR, max_norm=0.05)
    assert all(torch.equal(params_before[n], p) for n, p in model.named_parameters())
    assert all(torch.equal(grads_before[n], p.grad) for n, p in model.named_parameters())


def test_reference_run_one_cycle_reference_per_cycle():
    model = MLP(6, 8, 3, seed=2)
    batches = equal_batches(10)
    reference = reference_run(model, F.cross_entropy, cycles_of(batches, K), lr=LR)
    assert isinstance(reference, Reference)
    assert len(reference.cycles) == 3 and all(isinstance(c, CycleReference) for c in reference.cycles)
    assert reference.accum_steps == K and reference.num_micro_batches == 10
    names = [name for name, _ in model.named_parameters()]
    assert all(list(cycle.grads) == names for cycle in reference.cycles)
    assert {"no_division", "last_micro_batch_only", "equal_weights"} <= set(reference.cycles[0].mistakes)
    assert "not_clipped" not in reference.cycles[0].mistakes
    # Only a short cycle can be told apart from equal weights by dividing by accum_steps.
    assert "divided_by_accum_steps" not in reference.cycles[0].mistakes
    assert "divided_by_accum_steps" in reference.cycles[2].mistakes


def test_reference_run_accum_steps_defaults_to_longest_cycle():
    batches = equal_batches(6)
    reference = reference_run(MLP(6, 8, 3, seed=2), F.cross_entropy, [batches[:3], batches[3:5]], lr=LR)
    assert reference.accum_steps == 3 and reference.num_micro_batches == 5
    explicit = reference_run(MLP(6, 8, 3, seed=2), F.cross_entropy, [batches[:3]], lr=LR, accum_steps=4)
    assert explicit.accum_steps == 4


def test_reference_run_first_cycle_is_full_batch_gradient_and_loss():
    model = MLP(6, 8, 3, seed=3)
    batches = sized_batches([5, 17, 3, 9, 11, 6, 2, 20])
    reference = reference_run(model, F.cross_entropy, cycles_of(batches, K), lr=LR)
    x = torch.cat([bx for bx, _ in batches[:K]])
    y = torch.cat([by for _, by in batches[:K]])
    assert close(reference.cycles[0].grads, full_batch_gradients(model, F.cross_entropy, x, y))
    assert reference.cycles[0].loss == pytest.approx(F.cross_entropy(model(x), y).item(), rel=1e-5)


def test_reference_run_final_params_are_manual_sgd():
    model = MLP(6, 8, 3, seed=4)
    cycles = cycles_of(equal_batches(10), K)
    reference = reference_run(model, F.cross_entropy, cycles, lr=0.3)
    manual = clone_model(model)
    for cycle in cycles:
        x, y = torch.cat([bx for bx, _ in cycle]), torch.cat([by for _, by in cycle])
        gradient = full_batch_gradients(manual, F.cross_entropy, x, y)
        with torch.no_grad():
            for name, parameter in manual.named_parameters():
                parameter -= 0.3 * gradient[name]
    assert close(reference.final_params, param_snapshot(manual))
    assert not close(reference.final_params, param_snapshot(model))


def test_reference_run_max_norm_clips_to_that_norm():
    model = MLP(6, 8, 3, seed=5)
    cycles = cycles_of(equal_batches(), K)
    unclipped = reference_run(model, F.cross_entropy, cycles, lr=LR)
    clipped = reference_run(model, F.cross_entropy, cycles, lr=LR, max_norm=0.05)
    full = unclipped.cycles[0].grads
    assert global_grad_norm(full) > 0.05
    assert global_grad_norm(clipped.cycles[0].grads) == pytest.approx(0.05, rel=1e-4)
    factor = 0.05 / global_grad_norm(full)
    assert close(clipped.cycles[0].grads, {n: g * factor for n, g in full.items()})
    assert close(clipped.cycles[0].mistakes["not_clipped"], full)
    assert "clipped_every_micro_batch" in clipped.cycles[0].mistakes
    loose = reference_run(model, F.cross_entropy, cycles, lr=LR, max_norm=1e6)
    assert close(loose.cycles[0].grads, full) and close(loose.final_params, unclipped.final_params)


@pytest.mark.parametrize("cycles", [[], [[]], "second_empty"])
def test_reference_run_rejects_missing_cycles(cycles):
    batches = equal_batches(4)
    if cycles == "second_empty":
        cycles = [batches, []]
    with pytest.raises(ValueError, match="at least one cycle"):
        reference_run(MLP(6, 8, 3), F.cross_entropy, cycles, lr=LR)


# ---------------------------------------------------------------------------------------------
# check_updates
# ---------------------------------------------------------------------------------------------

def test_check_updates_passes_for_correct_accumulation():
    log, reference, sizes, losses, model = run(correct_loop, equal_batches())
    assert sizes == [c.size for c in reference.cycles] == [4, 4]
    assert log.count("backward") == 8 and log.count("step") == 2
    check_updates(log, reference, losses, final_params=param_snapshot(model))


@pytest.mark.parametrize("sizes", [[8] * 8 + [12, 4], [5, 17, 3, 9, 11, 6, 2, 20, 7]])
def test_check_updates_passes_for_correct_loop_with_short_and_unequal_cycles(sizes):
    log, reference, cycle_sizes, losses, model = run(correct_loop, sized_batches(sizes))
    check_updates(log, reference, losses, final_params=param_snapshot(model))


def test_check_updates_passes_with_clipping():
    def clipping_loop(model, optimizer, batches, accum_steps):
        for cycle in cycles_of(batches, accum_steps):
            optimizer.zero_grad()
            for x, y in cycle:
                (F.cross_entropy(model(x), y) / accum_steps).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            optimizer.step()

    log, reference, sizes, _, model = run(clipping_loop, equal_batches(), max_norm=0.05)
    check_updates(log, reference, final_params=param_snapshot(model))


@pytest.mark.parametrize(("loop", "count", "phrase"), [
    (step_every_micro_batch, 8, "ran 8 times for 8 micro-batches"),
    (drops_trailing_cycle, 10, "never got its step"),
    (zero_grad_every_micro_batch, 8, "zero_grad() ran inside the cycle"),
    (no_division, 8, "4x too large"),
    (divides_short_cycle_by_accum_steps, 10, "divided its micro-batch losses by accum_steps"),
    (returns_unscaled_losses, 8, "returned losses"),
    (one_backward_per_cycle, 8, "backward ran 2 times for 8 micro-batches"),
    (steps_twice_per_cycle, 8, "ran 4 times; expected 2"),
    (clears_before_step, 8, "had no gradient"),
])
def test_check_updates_names_the_mistake(loop, count, phrase):
    log, reference, sizes, losses, model = run(loop, equal_batches(count))
    with pytest.raises(AssertionError) as problem:
        check_updates(log, reference, losses, final_params=param_snapshot(model))
    assert phrase in str(problem.value)


def test_check_updates_messages_in_detail():
    log, reference, sizes, losses, _ = run(drops_trailing_cycle, equal_batches(10))
    with pytest.raises(AssertionError, match=r"ran 2 times, but 10 micro-batches with accum_steps=4 make 3"):
        check_updates(log, reference, losses)
    log, reference, sizes, losses, _ = run(divides_short_cycle_by_accum_steps, equal_batches(10))
    with pytest.raises(AssertionError, match=r"update 3 divided .* accum_steps=4, but its cycle has 2"):
        check_updates(log, reference, losses)
    log, reference, sizes, losses, _ = run(one_backward_per_cycle, equal_batches())
    with pytest.raises(AssertionError, match="backward ran 2 times for 8 micro-batches"):
        check_updates(log, reference, losses)


def test_check_updates_equal_weights_for_unequal_sizes():
    # Full cycles whose micro-batches differ in size: the check points at the samples' shares.
    log, reference, sizes, losses, _ = run(equal_weights, sized_batches([5, 17, 3, 9, 11, 6, 2, 20, 7]))
    with pytest.raises(AssertionError, match="share of the samples"):
        check_updates(log, reference, losses)
    # Equal full cycles and a short, unequal last cycle: only update 3 is wrong.
    log, reference, sizes, losses, _ = run(equal_weights, sized_batches([8] * 8 + [12, 4]))
    with pytest.raises(AssertionError, match="update 3 weighted every micro-batch equally"):
        check_updates(log, reference, losses)


def test_check_updates_clipping_mistakes():
    log, reference, sizes, _, _ = run(correct_loop, equal_batches(), max_norm=0.05)
    with pytest.raises(AssertionError, match="was never clipped"):
        check_updates(log, reference)
    log, reference, sizes, _, _ = run(clips_every_micro_batch, equal_batches(), max_norm=0.05)
    with pytest.raises(AssertionError, match="clipped after every micro-batch"):
        check_updates(log, reference)


def test_check_updates_other_gradient_and_final_params():
    def tripled(model, optimizer, batches, accum_steps):
        for cycle in cycles_of(batches, accum_steps):
            optimizer.zero_grad()
            for x, y in cycle:
                (3 * F.cross_entropy(model(x), y) / accum_steps).backward()
            optimizer.step()

    log, reference, sizes, _, _ = run(tripled, equal_batches())
    with pytest.raises(AssertionError, match="points the right way but is 3 times") as problem:
        check_updates(log, reference)
    assert problem.value.mistake == "cycle_weights_not_one"

    def with_weight_decay(model, optimizer, batches, accum_steps):
        for cycle in cycles_of(batches, accum_steps):
            optimizer.zero_grad()
            for x, y in cycle:
                decay = sum(p.pow(2).sum() for p in model.parameters())
                ((F.cross_entropy(model(x), y) + 0.1 * decay) / accum_steps).backward()
            optimizer.step()

    log, reference, sizes, _, _ = run(with_weight_decay, equal_batches())
    with pytest.raises(AssertionError, match="differs from the full-batch gradient of its cycle") as problem:
        check_updates(log, reference)
    assert problem.value.mistake == "wrong_gradient"

    log, reference, sizes, losses, model = run(correct_loop, equal_batches())
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    with pytest.raises(AssertionError, match="each step saw were right but the final parameters are not"):
        check_updates(log, reference, losses, final_params=param_snapshot(model))
    with pytest.raises(AssertionError, match="returned losses"):
        check_updates(log, reference, losses[:1])


def test_equal_weights_in_full_cycle_named_as_equal_weights():
    log, reference, sizes, losses, _ = run(equal_weights, sized_batches([5, 17, 3, 9, 11, 6, 2, 20, 7]))
    with pytest.raises(AssertionError) as problem:
        check_updates(log, reference, losses)
    assert "accum_steps=4, but its cycle has 4 micro-batches" not in str(problem.value)
    assert "weighted every micro-batch equally" in str(problem.value)


def test_no_division_factor_is_the_cycle_length():
    batches = equal_batches(3)
    model = MLP(6, 8, 3, seed=11)
    reference = reference_run(model, F.cross_entropy, [batches], lr=LR, accum_steps=K)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    with record(model=model, optimizer=optimizer) as log:
        no_division(model, optimizer, batches, K)
    with pytest.raises(AssertionError, match="3x too large"):
        check_updates(log, reference)


def test_too_few_steps_without_a_short_cycle():
    def steps_once(model, optimizer, batches, accum_steps):
        optimizer.zero_grad()
        for x, y in batches:
            (F.cross_entropy(model(x), y) / len(batches)).backward()
        optimizer.step()

    log, reference, sizes, _, _ = run(steps_once, equal_batches())
    with pytest.raises(AssertionError) as problem:
        check_updates(log, reference)
    assert "shorter cycle" not in str(problem.value)


def clears_only_after_step(model, optimizer, batches, accum_steps):
    """The tutorial loop: zero_grad right after step, never before the first cycle."""
    losses = []
    for cycle in cycles_of(batches, accum_steps):
        total = 0.0
        for x, y in cycle:
            loss = F.cross_entropy(model(x), y) / len(cycle)
            loss.backward()
            total = total + loss.detach()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(total.item())
    return losses


def run_with_old_gradients(loop, batches, accum_steps=K):
    model = MLP(6, 8, 3, seed=11)
    cycles = cycles_of(batches, accum_steps)
    reference = reference_run(model, F.cross_entropy, cycles, lr=LR, accum_steps=accum_steps)
    old = fill_grads(model, seed=5)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    with record(model=model, optimizer=optimizer) as log:
        losses = loop(model, optimizer, batches, accum_steps)
    return log, reference, [len(c) for c in cycles], losses, model, old


def test_check_updates_names_old_gradients_that_leak_in():
    log, reference, sizes, losses, model, old = run_with_old_gradients(correct_loop, equal_batches())
    check_updates(log, reference, losses, final_params=param_snapshot(model), stale_grads=old)
    log, reference, sizes, losses, _, old = run_with_old_gradients(clears_only_after_step, equal_batches())
    with pytest.raises(AssertionError, match="update 1 still holds the gradients that were in .grad"):
        check_updates(log, reference, losses, stale_grads=old)
    # A loop whose own mistake wipes the old gradients is named by that mistake, not as a leak.
    log, reference, sizes, losses, _, old = run_with_old_gradients(zero_grad_every_micro_batch,
                                                                   equal_batches())
    with pytest.raises(AssertionError, match="zero_grad\\(\\) ran inside the cycle"):
        check_updates(log, reference, losses, stale_grads=old)
    # Without stale_grads the same run is only "differs from the full-batch gradient".
    log, reference, sizes, losses, _, _ = run_with_old_gradients(clears_only_after_step, equal_batches())
    with pytest.raises(AssertionError, match="differs from the full-batch gradient"):
        check_updates(log, reference, losses)


def test_check_updates_wants_a_list_of_floats():
    log, reference, sizes, losses, _ = run(correct_loop, equal_batches())
    check_updates(log, reference, [torch.tensor(v).item() for v in losses])
    with pytest.raises(AssertionError, match="returned NoneType, not a list"):
        check_updates(log, reference, None)
    with pytest.raises(AssertionError, match="hold Tensor, not Python floats"):
        check_updates(log, reference, [torch.tensor(v, requires_grad=True) for v in losses])
    close_but_off = [v * (1 + 3e-4) for v in losses]
    with pytest.raises(AssertionError) as problem:
        check_updates(log, reference, close_but_off)
    shown = str(problem.value).split("but the mean losses of the cycles were")
    assert shown[0].split("[")[1] != shown[1].split("[")[1], "the message must show the numbers apart"


def test_check_updates_names_an_extra_empty_cycle():
    def one_cycle_too_many(model, optimizer, batches, accum_steps):
        losses = []
        for start in range(0, len(batches) + 1, accum_steps):
            cycle = batches[start:start + accum_steps]
            optimizer.zero_grad()
            total = 0.0
            for x, y in cycle:
                loss = F.cross_entropy(model(x), y) / len(cycle)
                loss.backward()
                total += loss.item()
            optimizer.step()
            losses.append(total)
        return losses

    log, reference, sizes, losses, _ = run(one_cycle_too_many, equal_batches())
    with pytest.raises(AssertionError, match="stepped once more after the last full cycle"):
        check_updates(log, reference, losses)
    log, reference, sizes, losses, _ = run(steps_twice_per_cycle, equal_batches())
    with pytest.raises(AssertionError) as problem:
        check_updates(log, reference, losses)
    assert "once more" not in str(problem.value)


# ---------------------------------------------------------------------------------------------
# token_references and check_token_gradients
# ---------------------------------------------------------------------------------------------

def tiny_lm(seed=31):
    return TinyLM(vocab_size=16, d_model=16, n_heads=2, n_layers=1, max_length=64, seed=seed)


def token_batches(lengths=(3, 17, 5, 40), seed=32):
    generator = torch.Generator().manual_seed(seed)
    return [lm_batch([torch.randint(1, 16, (n + 1,), generator=generator)]) for n in lengths]


def token_mean_accumulation(model, micro_batches, ignore_index=-100):
    tokens = sum(int((targets != ignore_index).sum()) for _, targets in micro_batches)
    total = torch.zeros(())
    for inputs, targets in micro_batches:
        loss_sum = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten(),
                                   ignore_index=ignore_index, reduction="sum")
        (loss_sum / tokens).backward()
        total += loss_sum.detach()
    return total.item() / tokens


def mean_of_means_accumulation(model, micro_batches):
    for inputs, targets in micro_batches:
        loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        (loss / len(micro_batches)).backward()


def test_token_references_leave_model_untouched_and_differ_for_unequal_lengths():
    model = tiny_lm()
    before = param_snapshot(model)
    full, naive, loss = token_references(model, token_batches())
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    assert set(full) == set(naive) == set(before)
    assert compare(naive, full).relative_error > 1e-2
    assert isinstance(loss, float) and loss > 0
    with pytest.raises(ValueError, match="at least one micro-batch"):
        token_references(model, [])


def test_token_references_equal_for_equal_token_counts():
    full, naive, _ = token_references(tiny_lm(), token_batches(lengths=(9, 9, 9)))
    assert close(naive, full)


def test_check_token_gradients_passes_for_token_mean():
    model = tiny_lm()
    batches = token_batches()
    full, naive, loss = token_references(model, batches)
    with record(model=model) as log:
        returned = token_mean_accumulation(model, batches)
    assert log.count("backward") == len(batches)
    check_token_gradients(grad_snapshot(model), full, naive)
    assert returned == pytest.approx(loss, rel=1e-4)


def test_check_token_gradients_padded_batches_and_ignore_index():
    model = tiny_lm(seed=33)
    sequences = make_token_sequences(9, 16, min_length=2, max_length=30, seed=34)
    batches = [lm_batch(sequences[i:j], ignore_index=-1) for i, j in ((0, 3), (3, 4), (4, 9))]
    full, naive, loss = token_references(model, batches, ignore_index=-1)
    returned = token_mean_accumulation(model, batches, ignore_index=-1)
    check_token_gradients(grad_snapshot(model), full, naive)
    assert returned == pytest.approx(loss, rel=1e-4)


def test_check_token_gradients_names_the_october_2024_bug():
    model = tiny_lm()
    batches = token_batches()
    full, naive, _ = token_references(model, batches)
    mean_of_means_accumulation(model, batches)
    with pytest.raises(AssertionError, match="October 2024"):
        check_token_gradients(grad_snapshot(model), full, naive)


def test_check_token_gradients_other_mistakes():
    model = tiny_lm()
    batches = token_batches()
    full, naive, _ = token_references(model, batches)
    with pytest.raises(AssertionError, match="have no .grad"):
        check_token_gradients(grad_snapshot(model), full, naive)
    token_mean_accumulation(model, batches)
    token_mean_accumulation(model, batches)  # .grad still held the first call's gradients
    with pytest.raises(AssertionError, match="twice the expected one"):
        check_token_gradients(grad_snapshot(model), full, naive)
    halved = {name: g / 2 for name, g in full.items()}
    with pytest.raises(AssertionError, match="differs from the full-batch token-mean gradient"):
        check_token_gradients(halved, full, naive)


# ---------------------------------------------------------------------------------------------
# check_amp_calls
# ---------------------------------------------------------------------------------------------

def amp_correct(model, optimizer, scaler, batches, accum_steps, max_norm):
    losses = []
    for index, (x, y) in enumerate(batches):
        if index % accum_steps == 0:
            optimizer.zero_grad(set_to_none=True)
            cycle_loss = 0.0
        loss = F.cross_entropy(model(x), y) / accum_steps
        scaler.scale(loss).backward()
        cycle_loss += loss.item()
        if (index + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
            losses.append(cycle_loss)
    return losses


def amp_clip_before_unscale(model, optimizer, scaler, batches, accum_steps, max_norm):
    for index, (x, y) in enumerate(batches):
        if index % accum_steps == 0:
            optimizer.zero_grad()
        scaler.scale(F.cross_entropy(model(x), y) / accum_steps).backward()
        if (index + 1) % accum_steps == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.unscale_(optimizer)
            scaler.step(optimizer)
            scaler.update()


def amp_clip_every_micro_batch(model, optimizer, scaler, batches, accum_steps, max_norm):
    for index, (x, y) in enumerate(batches):
        if index % accum_steps == 0:
            optimizer.zero_grad()
        scaler.scale(F.cross_entropy(model(x), y) / accum_steps).backward()
        if (index + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if (index + 1) % accum_steps == 0:
            scaler.step(optimizer)
            scaler.update()


def amp_update_before_step(model, optimizer, scaler, batches, accum_steps, max_norm):
    for index, (x, y) in enumerate(batches):
        if index % accum_steps == 0:
            optimizer.zero_grad()
        scaler.scale(F.cross_entropy(model(x), y) / accum_steps).backward()
        if (index + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.update()
            scaler.step(optimizer)


def amp_no_scale(model, optimizer, scaler, batches, accum_steps, max_norm):
    # Forgets the scaler entirely (with unscale_ or scaler.step but no scale, torch itself raises).
    for index, (x, y) in enumerate(batches):
        if index % accum_steps == 0:
            optimizer.zero_grad()
        (F.cross_entropy(model(x), y) / accum_steps).backward()
        if (index + 1) % accum_steps == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()


def amp_scale_last_only(model, optimizer, scaler, batches, accum_steps, max_norm):
    for index, (x, y) in enumerate(batches):
        if index % accum_steps == 0:
            optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y) / accum_steps
        if (index + 1) % accum_steps == 0:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()


def run_amp(loop, count=8, max_norm=0.05):
    batches = split_micro_batches(*make_blobs(8 * count, 6, 3, seed=41), micro_batch_size=8)
    model = MLP(6, 8, 3, seed=42)
    reference = reference_run(model, F.cross_entropy, cycles_of(batches, K), lr=LR, max_norm=max_norm)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with record(model=model, optimizer=optimizer, scaler=scaler) as log:
        losses = loop(model, optimizer, scaler, batches, K, max_norm)
    return log, reference, losses, model


def test_check_amp_calls_passes_for_correct_loop():
    log, reference, losses, model = run_amp(amp_correct)
    assert log.count("scale") == 8 and log.of("scale")[0].info["scale"] == 1024.0
    check_amp_calls(log, num_micro_batches=8, num_updates=2)
    check_updates(log, reference, losses, final_params=param_snapshot(model))


@pytest.mark.parametrize(("loop", "count", "phrase"), [
    (amp_clip_before_unscale, 8, "clipped before unscale_"),
    (amp_clip_every_micro_batch, 8, "clip once per cycle"),
    # scaler.step after update leaves the optimizer STEPPED, so a second cycle's unscale_ would
    # raise inside torch: one cycle is enough to see the order.
    (amp_update_before_step, 4, "update() ran before"),
    (amp_no_scale, 8, "scaler.scale(loss) ran 0 times"),
    (amp_scale_last_only, 8, "scaler.scale(loss) ran 2 times for 8"),
])
def test_check_amp_calls_names_the_mistake(loop, count, phrase):
    log, *_ = run_amp(loop, count=count)
    with pytest.raises(AssertionError) as problem:
        check_amp_calls(log, num_micro_batches=count, num_updates=count // K)
    assert phrase in str(problem.value)


def test_check_amp_calls_clip_before_unscale_names_the_scale():
    log, *_ = run_amp(amp_clip_before_unscale)
    with pytest.raises(AssertionError, match=r"multiplied by the scale 1024 \(norm"):
        check_amp_calls(log, num_micro_batches=8, num_updates=2)


def test_check_amp_calls_counts_per_update():
    log, *_ = run_amp(amp_correct)
    with pytest.raises(AssertionError, match=r"scaler.unscale_\(optimizer\) ran 2 times for 1 optimizer"):
        check_amp_calls(log, num_micro_batches=8, num_updates=1)


def test_check_token_gradients_with_the_callers_gradients():
    model = tiny_lm()
    batches = token_batches()
    full, naive, _ = token_references(model, batches)
    old = fill_grads(model, scale=0.1, seed=3)
    token_mean_accumulation(model, batches)
    check_token_gradients(grad_snapshot(model), full, naive, before=old)

    def clears_first(model, micro_batches):
        model.zero_grad(set_to_none=True)
        return token_mean_accumulation(model, micro_batches)

    fill_grads(model, scale=0.1, seed=3)
    clears_first(model, batches)
    with pytest.raises(AssertionError, match="cleared the gradients that .grad held"):
        check_token_gradients(grad_snapshot(model), full, naive, before=old)
    fill_grads(model, scale=0.1, seed=3)
    mean_of_means_accumulation(model, batches)
    with pytest.raises(AssertionError, match="October 2024"):
        check_token_gradients(grad_snapshot(model), full, naive, before=old)


def test_check_token_gradients_names_a_wrong_divisor():
    model = tiny_lm()
    batches = [lm_batch(make_token_sequences(3, 16, min_length=2, max_length=30, seed=34))]
    full, naive, _ = token_references(model, batches)
    inputs, targets = batches[0]
    summed = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten(), reduction="sum")
    summed.div(targets.numel()).backward()      # divided by every position, padding included
    with pytest.raises(AssertionError, match=r"by a factor: it is 0\.\d+ times it"):
        check_token_gradients(grad_snapshot(model), full, naive)


# ---------------------------------------------------------------------------------------------
# student_error: torch's errors named in the course's words
# ---------------------------------------------------------------------------------------------

def amp_update_every_micro_batch(model, optimizer, scaler, batches, accum_steps, max_norm):
    for index, (x, y) in enumerate(batches):
        if index % accum_steps == 0:
            optimizer.zero_grad()
        scaler.scale(F.cross_entropy(model(x), y) / accum_steps).backward()
        if (index + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)
            scaler.step(optimizer)
        scaler.update()


def amp_unscale_every_micro_batch(model, optimizer, scaler, batches, accum_steps, max_norm):
    for index, (x, y) in enumerate(batches):
        if index % accum_steps == 0:
            optimizer.zero_grad()
        scaler.scale(F.cross_entropy(model(x), y) / accum_steps).backward()
        scaler.unscale_(optimizer)
        if (index + 1) % accum_steps == 0:
            scaler.step(optimizer)
            scaler.update()


def amp_never_updates(model, optimizer, scaler, batches, accum_steps, max_norm):
    for index, (x, y) in enumerate(batches):
        if index % accum_steps == 0:
            optimizer.zero_grad()
        scaler.scale(F.cross_entropy(model(x), y) / accum_steps).backward()
        if (index + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)
            scaler.step(optimizer)


def amp_steps_before_the_last_backward(model, optimizer, scaler, batches, accum_steps, max_norm):
    losses = [F.cross_entropy(model(x), y) / accum_steps for x, y in batches]
    for loss in losses:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


@pytest.mark.parametrize(("loop", "phrase"), [
    (amp_update_every_micro_batch, "update the scale once per optimizer step, right after scaler.step"),
    (amp_never_updates, "call scaler.update() once right after every scaler.step(optimizer)"),
    (amp_steps_before_the_last_backward, "step only after the last backward of the cycle"),
    (amp_unscale_every_micro_batch, "scaler.unscale_(optimizer) ran twice in one cycle"),
])
def test_student_error_names_gradscaler_errors(loop, phrase):
    problem = student_error("train_accumulated_amp", raised_of(called(run_amp, loop)))
    assert phrase in str(problem) and str(problem).startswith("train_accumulated_amp stopped with ")


def test_student_error_names_an_empty_cycle_only_when_told_the_sizes():
    error = raised_of(called(lambda: 1 / sum(len(x) for x in [])))
    problem = student_error("train_accumulated_any_sizes", error, num_micro_batches=10, accum_steps=5)
    assert str(problem).startswith(
        "train_accumulated_any_sizes stopped with ZeroDivisionError: division by zero at `")
    assert "2 cycles (ceil(10 / 5))" in str(problem) and "one more, empty cycle" in str(problem)
    assert "empty cycle" not in str(student_error("train_accumulated_any_sizes", error))


def test_student_error_names_an_ignore_index_not_passed_on():
    error = raised_of(called(F.cross_entropy, torch.randn(3, 5), torch.tensor([1, -1, 2])))
    assert "pass ignore_index=ignore_index on" in str(student_error("accumulate_token_gradients", error,
                                                                    ignore_index=-1))
    assert "ignore_index" not in str(student_error("accumulate_token_gradients", error, ignore_index=-7))


def test_student_error_quotes_other_errors_and_the_stub_stays_itself():
    with pytest.raises(NotImplementedError, match="replace this line"):
        raised_of(called(lambda: (_ for _ in ()).throw(NotImplementedError("replace this line"))))
    # An error nobody recognises: quoted with the line that raised, and what the test was checking,
    # without a guessed cause.
    assert str(student_error("train_accumulated", Raised("RuntimeError", "some other error", "x = f(y)"),
                             expected="makes the full-batch updates")) == (
        "train_accumulated stopped with RuntimeError: some other error at `x = f(y)`; the test was checking "
        "that train_accumulated makes the full-batch updates, and the error comes from your code (run this "
        "test cell in your notebook to see its traceback)")
    own_assert = student_error("train_accumulated", Raised("AssertionError", "a student's own assert"))
    assert str(own_assert).startswith(
        "train_accumulated stopped with AssertionError: a student's own assert; the test was checking what")


# ---------------------------------------------------------------------------------------------
# The exercises' runs: prefixed, check_training, check_token_accumulation, AmpAccumulationChecks
# ---------------------------------------------------------------------------------------------

def test_prefixed_starts_an_assertion_message_and_lets_other_errors_through():
    with pytest.raises(AssertionError, match="^with accum_steps=2: wrong$"), \
            prefixed("with accum_steps=2"):
        raise AssertionError("wrong")
    with pytest.raises(AssertionError, match="^wrong$"), prefixed(None):
        raise AssertionError("wrong")
    with pytest.raises(ValueError, match="^other$"), prefixed("where"):
        raise ValueError("other")


def as_exercise(loop):
    """A loop of this file called as exercises 1 and 2 call theirs: (model, optimizer, loss_fn, ...)."""
    return lambda model, optimizer, _loss_fn, batches, accum_steps: loop(model, optimizer, batches,
                                                                          accum_steps)


def training_case(sizes, accum_steps, seed=11):
    """A fresh MLP, the micro-batches of `sizes` and the reference_run of their cycles."""
    batches, model = sized_batches(sizes), MLP(6, 8, 3, seed=seed)
    reference = reference_run(model, F.cross_entropy, cycles_of(batches, accum_steps), lr=LR,
                              accum_steps=accum_steps)
    return model, batches, reference


def test_check_training_passes_a_correct_loop_and_returns_its_log():
    model, batches, reference = training_case([8] * 8 + [12, 4], 4)
    log = checks_accumulation.check_training(as_exercise(correct_loop), "train_accumulated_any_sizes", model,
                                             batches, 4, reference, lr=LR, old_seed=24, name_empty_cycle=True)
    assert log.count("step") == 3 and log.count("backward") == 10


@pytest.mark.parametrize(("loop", "phrase"), [
    (no_division, "4x too large"),
    (clears_only_after_step, "still holds the gradients that were in .grad before"),
    (step_every_micro_batch, "optimizer.step() ran 8 times for 8 micro-batches with accum_steps=4"),
])
def test_check_training_names_the_mistake_after_where(loop, phrase):
    model, batches, reference = training_case([8] * 8, 4)
    with pytest.raises(AssertionError) as problem:
        checks_accumulation.check_training(as_exercise(loop), "train_accumulated", model, batches, 4,
                                           reference, lr=LR, old_seed=15, old_scale=3.0,
                                           where="with accum_steps=4")
    assert str(problem.value).startswith("with accum_steps=4: ") and phrase in str(problem.value)


def test_check_training_judges_memory_not_the_backward_count():
    """One requirement the parameters cannot show, one micro-batch's activations alive at a time,
    is judged by the bytes the graph held: padding the backward count does not hide a whole-cycle
    graph, and a correct loop through torch.autograd.grad passes whatever it counts."""
    def whole_cycle_padded(model, optimizer, batches, accum_steps):
        losses = []
        for cycle in cycles_of(batches, accum_steps):
            optimizer.zero_grad(set_to_none=True)
            x, y = torch.cat([x for x, _ in cycle]), torch.cat([y for _, y in cycle])
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            for _ in cycle[1:]:   # zero backward passes, only to make the count look right
                (0 * sum(p.sum() for p in model.parameters())).backward()
            optimizer.step()
            losses.append(loss.item())
        return losses

    def backward_of_the_sum(model, optimizer, batches, accum_steps):
        losses = []
        for cycle in cycles_of(batches, accum_steps):
            optimizer.zero_grad(set_to_none=True)
            loss = sum(F.cross_entropy(model(x), y) / len(cycle) for x, y in cycle)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses

    def by_autograd_grad(model, optimizer, batches, accum_steps):
        params, losses = list(model.parameters()), []
        for cycle in cycles_of(batches, accum_steps):
            sums, cycle_loss = [torch.zeros_like(p) for p in params], 0.0
            for x, y in cycle:
                loss = F.cross_entropy(model(x), y) / len(cycle)
                cycle_loss += loss.item()
                grads = torch.autograd.grad(loss, params)
                for total, grad in zip(sums, grads, strict=True):
                    total += grad
            for p, total in zip(params, sums, strict=True):
                p.grad = total
            optimizer.step()
            losses.append(cycle_loss)
        return losses

    model, batches, reference = training_case([8] * 8, 4)
    for loop, phrase in ((whole_cycle_padded, "one forward pass ran 32 rows at once"),
                         (backward_of_the_sum, "the autograd graphs of 4 forward passes at once")):
        with pytest.raises(AssertionError, match="the result is right, but") as failed:
            checks_accumulation.check_training(as_exercise(loop), "train_accumulated", model, batches, 4,
                                               reference, lr=LR, old_seed=15)
        assert phrase in str(failed.value)
    checks_accumulation.check_training(as_exercise(by_autograd_grad), "train_accumulated", model, batches, 4,
                                       reference, lr=LR, old_seed=None)


def test_check_training_names_an_empty_cycle_only_when_asked():
    def divides_by_an_empty_cycle(model, optimizer, loss_fn, batches, accum_steps):
        return 1 / sum(len(x) for x in [])

    model, batches, reference = training_case([8] * 10, 5)
    with pytest.raises(AssertionError, match="^train_accumulated_any_sizes stopped with ZeroDivisionError.*"
                                             "one more, empty cycle"):
        checks_accumulation.check_training(divides_by_an_empty_cycle, "train_accumulated_any_sizes", model,
                                           batches, 5, reference, lr=LR, old_seed=24, name_empty_cycle=True)
    with pytest.raises(AssertionError,
                       match="^train_accumulated stopped with ZeroDivisionError: division by zero at "
                             "`return 1 / sum.*; the test was checking that train_accumulated makes"):
        checks_accumulation.check_training(divides_by_an_empty_cycle, "train_accumulated", model, batches, 5,
                                           reference, lr=LR, old_seed=24)


def test_check_training_keeps_stderr_empty_for_a_student_who_warns(capsys):
    import sys
    import warnings

    def chatty_loop(model, optimizer, batches, accum_steps):
        warnings.warn("a harmless warning from the student's code", UserWarning, stacklevel=1)
        print("a note on stderr", file=sys.stderr)
        return correct_loop(model, optimizer, batches, accum_steps)

    model, batches, reference = training_case([8] * 8, K)
    checks_accumulation.check_training(as_exercise(chatty_loop), "train_accumulated", model, batches, K,
                                       reference, lr=LR, old_seed=15)
    shown = capsys.readouterr()
    assert shown.err == ""
    assert "a harmless warning from the student's code" in shown.out and "a note on stderr" in shown.out


def test_check_token_accumulation_passes_the_token_mean_and_adds_to_the_callers_gradients():
    model, batches = tiny_lm(), token_batches()
    log = checks_accumulation.check_token_accumulation(token_mean_accumulation, model, batches, -100,
                                                       token_references(model, batches), old_seed=35)
    assert log.count("backward") == 4


def test_check_token_accumulation_messages_visible_and_unseen():
    model, batches = tiny_lm(), token_batches()
    references = token_references(model, batches)
    where = "with ignore_index=-100 and [1, 1, 1, 1] sequences per micro-batch: "

    def check(accumulate, **kwargs):
        with pytest.raises(AssertionError) as problem:
            checks_accumulation.check_token_accumulation(accumulate, model, batches, -100, references,
                                                         old_seed=35, **kwargs)
        return str(problem.value)

    def mean_of_means(model, micro_batches, ignore_index):
        mean_of_means_accumulation(model, micro_batches)
        return 1.0

    def first_micro_batch_only(model, micro_batches, ignore_index):
        return token_mean_accumulation(model, micro_batches[:1], ignore_index)

    def returns_a_tensor(model, micro_batches, ignore_index):
        return torch.tensor(token_mean_accumulation(model, micro_batches, ignore_index))

    def wrong_loss(model, micro_batches, ignore_index):
        return token_mean_accumulation(model, micro_batches, ignore_index) * 2

    assert check(mean_of_means).startswith(where) and "October 2024" in check(mean_of_means)
    assert check(first_micro_batch_only) == (
        f"{where}backward ran 1 times for 4 micro-batches: run one forward and one backward per micro-batch "
        "(that is what keeps memory low)")
    assert check(first_micro_batch_only, where="there", unseen=True) == \
        "there: run one backward per micro-batch"
    assert check(returns_a_tensor) == "return a Python float (.item() once, at the end), not Tensor"
    assert check(returns_a_tensor, where="there", unseen=True).startswith("there: returned loss tensor(")
    assert check(wrong_loss).startswith(f"{where}returned loss ")
    assert "mean loss over the real tokens of the cycle is" in check(wrong_loss)


def amp_loop(model, optimizer, scaler, loss_fn, micro_batches, accum_steps, max_norm, amp_dtype=None, *,
             enabled=True, via_scaler=True, new_scale=None, divide=True, skip_by_hand=False):
    """Exercise 4's loop, correct by default; each keyword makes one mistake."""
    device_type = next(model.parameters()).device.type
    losses = []
    for index, (x, y) in enumerate(micro_batches):
        if index % accum_steps == 0:
            optimizer.zero_grad(set_to_none=True)
            cycle_loss = 0.0
        with torch.autocast(device_type, dtype=amp_dtype, enabled=amp_dtype is not None if enabled else True):
            loss = loss_fn(model(x), y) / (accum_steps if divide else 1)
        scaler.scale(loss).backward()
        cycle_loss += loss.item()
        if (index + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            if not (skip_by_hand and not torch.isfinite(norm)):
                scaler.step(optimizer) if via_scaler else optimizer.step()
            scaler.update(new_scale)
            losses.append(cycle_loss)
    return losses


def amp_checks(**mistake):
    def loop(*args, **kwargs):
        return amp_loop(*args, **kwargs, **mistake)

    def reference(model, cycles, max_norm):
        return reference_run(model, F.cross_entropy, cycles, lr=LR, max_norm=max_norm)

    return checks_accumulation.AmpAccumulationChecks(loop, reference, lr=LR)


def test_amp_accumulation_checks_pass_a_correct_loop():
    batches, checks = equal_batches(), amp_checks()
    run = checks.check_updates(42, batches, 4, max_norm=0.05)
    assert run.dtypes == {torch.float32} and run.log.count("step") == 2 and len(run.losses) == 2
    checks.check_updates(45, batches, 4, max_norm=1e6, clip=False)
    assert checks.check_skips_inf(43, batches, 4, max_norm=0.05, inf_at=(5, 0, 0)).scale == 512.0
    checks.check_skips_inf(48, batches[:6], 2, max_norm=0.05, inf_at=(1, 2, 3), unseen=True)
    assert checks.check_float16(44, batches[:4], 2, max_norm=0.05, init_scale=256.0).dtypes == {torch.float16}
    assert batches[5][0].isfinite().all(), "the inf goes into a copy of the test's micro-batches"


@pytest.mark.parametrize(("mistake", "check", "message"), [
    ({"enabled": False}, "updates",
     "with amp_dtype=None the first Linear layer ran in {torch.bfloat16}: autocast must be off"),
    ({"divide": False}, "updates",
     "with accum_steps=4 and max_norm=1e+06: the gradient at update 1 is the plain sum"),
    ({"via_scaler": False}, "inf",
     "the optimizer really stepped 2 times, but the second cycle's gradients hold inf: let scaler.step"),
    ({"via_scaler": False}, "inf unseen",
     "with an inf in the first of three cycles the optimizer really stepped 3 times, not 2: let scaler.step"),
    ({"new_scale": 1024.0}, "inf",
     "after one inf the scale should halve from 1024 to 512, it is 1024: call scaler.update() once"),
    ({"new_scale": 1024.0}, "inf unseen",
     "after one inf in three cycles the scale should be 512, it is 1024"),
    ({"skip_by_hand": True}, "inf",
     "the parameters and the scale are right, but scaler.step(optimizer) ran 1 times for 2 cycles"),
])
def test_amp_accumulation_checks_name_the_mistake(mistake, check, message):
    batches, checks = equal_batches(), amp_checks(**mistake)
    with pytest.raises(AssertionError) as problem:
        if check == "updates":
            checks.check_updates(45, batches, 4, max_norm=1e6, where="with accum_steps=4 and max_norm=1e+06")
        elif check == "inf":
            checks.check_skips_inf(43, batches, 4, max_norm=0.05, inf_at=(5, 0, 0))
        else:
            checks.check_skips_inf(48, batches[:6], 2, max_norm=0.05, inf_at=(1, 2, 3), unseen=True)
    assert str(problem.value).startswith(message)


def test_amp_accumulation_checks_float16_needs_autocast():
    def no_autocast(model, optimizer, scaler, loss_fn, micro_batches, accum_steps, max_norm, amp_dtype=None):
        return amp_loop(model, optimizer, scaler, loss_fn, micro_batches, accum_steps, max_norm, None)

    checks = checks_accumulation.AmpAccumulationChecks(no_autocast, lambda model, cycles, max_norm: None)
    with pytest.raises(AssertionError, match=r"\{torch.float32\}: run the forward inside torch.autocast"):
        checks.check_float16(44, equal_batches()[:4], 2, max_norm=0.05, init_scale=256.0)
    with pytest.raises(AssertionError, match=r"produced \{torch.float32\}: use amp_dtype$"):
        checks.check_float16(44, equal_batches()[:4], 2, max_norm=0.05, init_scale=256.0, unseen=True)


# ---------------------------------------------------------------------------------------------
# The kernel half (helpers.collect.accumulation) and what the judge reads back from it
# ---------------------------------------------------------------------------------------------

def test_the_collectors_import_no_checks_module():
    """At grading the judges (helpers/checks/) are stubs in the kernel: the collectors must not need them."""
    import subprocess
    import sys

    code = ("import sys, helpers.collect.accumulation\n"
            "print(sorted(name for name in sys.modules if name.startswith('helpers.checks')))")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "[]"


def test_a_forged_log_can_only_lose_calls_and_unreadable_tensors_fail_the_check():
    log = call_log([
        {"name": "backward", "info": {}}, {"name": "pass_the_test", "info": {}}, "step", {"name": "step"},
        ["step", {}], {"name": "step", "info": {1: "not a name"}}, {"name": "step", "info": {"grads": {}}}])
    assert log.names() == ["backward", "step"]
    like = {"w": torch.zeros(2, 3)}
    assert returned_tensors({"params": {"w": None}}, "params", like, "x") == {"w": None}
    for forged in ({"w": torch.zeros(3)}, {"v": torch.zeros(2, 3)}, [torch.zeros(2, 3)], {"w": 0.0}):
        with pytest.raises(AssertionError, match="could not read the final parameters back"):
            returned_tensors({"params": forged}, "params", like, "the final parameters")


def test_a_whole_cycle_graph_is_seen_however_ordinary_pytorch_hides_it():
    """Saved-tensor hooks are per thread and innermost-wins: save_on_cpu, checkpoint, the student's
    own hooks or a worker thread hide a whole cycle's graph from the saved-tensor meter, never from
    the model's layers (helpers.collect.autograd_graphs)."""
    import threading

    from torch.utils.checkpoint import checkpoint

    def cycle_loss(model, cycle):
        return sum(F.cross_entropy(model(x), y) / len(cycle) for x, y in cycle)

    def run_cycles(model, optimizer, batches, accum_steps, one_backward):
        losses = []
        for cycle in cycles_of(batches, accum_steps):
            optimizer.zero_grad(set_to_none=True)
            losses.append(one_backward(model, cycle))
            optimizer.step()
        return losses

    def on_cpu(model, optimizer, batches, accum_steps):
        def one_backward(model, cycle):
            with torch.autograd.graph.save_on_cpu():
                loss = cycle_loss(model, cycle)
            loss.backward()
            return loss.item()
        return run_cycles(model, optimizer, batches, accum_steps, one_backward)

    def own_hooks(model, optimizer, batches, accum_steps):
        def one_backward(model, cycle):
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                loss = cycle_loss(model, cycle)
            loss.backward()
            return loss.item()
        return run_cycles(model, optimizer, batches, accum_steps, one_backward)

    def checkpointed(model, optimizer, batches, accum_steps):
        def one_backward(model, cycle):
            anchor = torch.zeros((), requires_grad=True)
            loss = checkpoint(lambda a: a + cycle_loss(model, cycle), anchor, use_reentrant=False)
            loss.backward()
            return loss.item()
        return run_cycles(model, optimizer, batches, accum_steps, one_backward)

    def threaded(model, optimizer, batches, accum_steps):
        def one_backward(model, cycle):
            built = []
            worker = threading.Thread(target=lambda: built.append(cycle_loss(model, cycle)))
            worker.start()
            worker.join()
            built[0].backward()
            return built[0].item()
        return run_cycles(model, optimizer, batches, accum_steps, one_backward)

    model, batches, reference = training_case([8] * 8, 4)
    for loop in (on_cpu, own_hooks, checkpointed, threaded):
        with pytest.raises(AssertionError, match="the autograd graphs of 4 forward passes at once"):
            checks_accumulation.check_training(as_exercise(loop), "train_accumulated", model, batches, 4,
                                               reference, lr=LR, old_seed=15)


def test_a_loop_that_drops_the_short_last_cycle_is_told_so():
    def full_cycles_only(model, optimizer, batches, accum_steps):
        losses = []
        for cycle in cycles_of(batches, accum_steps):
            if len(cycle) < accum_steps:
                break
            optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for x, y in cycle:
                loss = F.cross_entropy(model(x), y) / accum_steps
                loss.backward()
                total += loss.item()
            optimizer.step()
            losses.append(total)
        return losses

    model, batches, reference = training_case([8] * 10, 4)
    with pytest.raises(AssertionError, match="the last, shorter cycle .2 micro-batches. never ran"):
        checks_accumulation.check_training(as_exercise(full_cycles_only), "train_accumulated_any_sizes",
                                           model, batches, 4, reference, lr=LR, old_seed=24)


def test_exercise_1_counts_host_reads_once_the_result_is_right():
    def reads_every_micro_batch(model, optimizer, batches, accum_steps):
        losses = []
        for cycle in cycles_of(batches, accum_steps):
            optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for x, y in cycle:
                loss = F.cross_entropy(model(x), y) / accum_steps
                loss.backward()
                total += loss.item()
            optimizer.step()
            losses.append(total)
        return losses

    model, batches, reference = training_case([8] * 8, 4)
    with pytest.raises(AssertionError, match="read values to the host 8 times .item 8. for 2 updates"):
        checks_accumulation.check_training(as_exercise(reads_every_micro_batch), "train_accumulated", model,
                                           batches, 4, reference, lr=LR, old_seed=15, reads_per_update=1)

    def reads_once_per_update(model, optimizer, batches, accum_steps):
        losses = []
        for cycle in cycles_of(batches, accum_steps):
            optimizer.zero_grad(set_to_none=True)
            total = torch.zeros(())
            for x, y in cycle:
                loss = F.cross_entropy(model(x), y) / accum_steps
                loss.backward()
                total += loss.detach()
            optimizer.step()
            losses.append(total.item())
        return losses

    checks_accumulation.check_training(as_exercise(reads_once_per_update), "train_accumulated", model,
                                       batches, 4, reference, lr=LR, old_seed=15, reads_per_update=1)


def test_amp_accumulation_checks_float16_wants_the_loss_under_autocast():
    """cross_entropy runs in float32 under autocast anyway: the outcome cannot show where the loss
    ran, so the calls of loss_fn are counted."""
    def loss_outside(model, optimizer, scaler, loss_fn, micro_batches, accum_steps, max_norm, amp_dtype=None):
        device_type = next(model.parameters()).device.type
        losses = []
        for index, (x, y) in enumerate(micro_batches):
            if index % accum_steps == 0:
                optimizer.zero_grad(set_to_none=True)
                cycle_loss = torch.zeros(())
            with torch.autocast(device_type, dtype=amp_dtype, enabled=amp_dtype is not None):
                output = model(x)
            loss = loss_fn(output, y) / accum_steps
            scaler.scale(loss).backward()
            cycle_loss += loss.detach()
            if (index + 1) % accum_steps == 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                scaler.step(optimizer)
                scaler.update()
                losses.append(cycle_loss.item())
        return losses

    def reference(model, cycles, max_norm):
        return reference_run(model, F.cross_entropy, cycles, lr=LR, max_norm=max_norm)

    checks = checks_accumulation.AmpAccumulationChecks(loss_outside, reference, lr=LR)
    with pytest.raises(AssertionError, match="the loss was computed outside torch.autocast 4 of 4 times"):
        checks.check_float16(44, equal_batches()[:4], 2, max_norm=0.05, init_scale=256.0)


def test_exercise_1_wants_the_running_loss_detached():
    """ "Add up loss.detach() over the cycle": a total that keeps the graph reads once per update,
    with the right result, so the graph on the value read is counted."""
    def summing(detach):
        def loop(model, optimizer, batches, accum_steps):
            losses = []
            for cycle in cycles_of(batches, accum_steps):
                optimizer.zero_grad(set_to_none=True)
                total = 0.0
                for x, y in cycle:
                    loss = F.cross_entropy(model(x), y) / accum_steps
                    loss.backward()
                    total = total + (loss.detach() if detach else loss)
                optimizer.step()
                losses.append(total.item())
            return losses
        return as_exercise(loop)

    model, batches, reference = training_case([8] * 8, 4)
    kwargs = {"lr": LR, "old_seed": 15, "reads_per_update": 1}
    checks_accumulation.check_training(summing(detach=False), "train_accumulated", model, batches, 4,
                                       reference, **kwargs)          # exercise 2 does not ask for it
    with pytest.raises(AssertionError, match="the running loss you read still carries the autograd graph"):
        checks_accumulation.check_training(summing(detach=False), "train_accumulated", model, batches, 4,
                                           reference, detached_total=True, **kwargs)
    checks_accumulation.check_training(summing(detach=True), "train_accumulated", model, batches, 4,
                                       reference, detached_total=True, **kwargs)


def test_exercise_3_reads_the_loss_once_at_the_end_and_leaves_the_parameters():
    """Counted: floating-point host reads after the first backward (the loss), not integer token
    counts, which the hint's counting may read whenever it needs them."""
    model, batches = tiny_lm(), token_batches()
    references = token_references(model, batches)

    def check(accumulate):
        return checks_accumulation.check_token_accumulation(accumulate, model, batches, -100, references,
                                                            old_seed=35)

    def reads_every_loss(model, micro_batches, ignore_index=-100):
        tokens = sum((targets != ignore_index).sum() for _, targets in micro_batches)
        total = 0.0
        for inputs, targets in micro_batches:
            loss_sum = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten(),
                                       ignore_index=ignore_index, reduction="sum")
            (loss_sum / tokens).backward()
            total += loss_sum.item()
        return total / tokens.item()

    def counts_in_the_loop(model, micro_batches, ignore_index=-100):
        tokens = sum((targets != ignore_index).sum() for _, targets in micro_batches)
        total = torch.zeros(())
        for inputs, targets in micro_batches:
            mean = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten(), ignore_index=ignore_index)
            real = (targets != ignore_index).sum().item()               # an int, read per micro-batch
            (mean * real / tokens).backward()
            total += mean.detach() * real
        return total.item() / tokens.item()

    def counts_as_floats_first(model, micro_batches, ignore_index=-100):
        tokens = sum(float((t != ignore_index).float().sum()) for _, t in micro_batches)
        return token_mean_accumulation(model, micro_batches, ignore_index) * tokens / tokens

    def steps_too(model, micro_batches, ignore_index=-100):
        loss = token_mean_accumulation(model, micro_batches, ignore_index)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter -= 0.1 * parameter.grad
        return loss

    for right in (token_mean_accumulation, counts_in_the_loop, counts_as_floats_first):
        check(right)
    with pytest.raises(AssertionError, match="read a loss to the host 4 times after the first backward"):
        check(reads_every_loss)
    with pytest.raises(AssertionError, match="the gradient is right, but your function changed the param"):
        check(steps_too)


def test_a_loop_that_clears_the_models_hooks_is_told_so():
    """Clearing a module's forward hooks would hide every forward from the count of graphs alive."""
    from helpers.collect.autograd_graphs import graphs_alive

    model = MLP(6, 8, 3, seed=11)
    with graphs_alive(model) as graphs:
        for module in model.modules():
            module._forward_hooks.clear()
        model(torch.randn(4, 6)).sum().backward()
    record = graphs.plain()
    assert record["hooks_lost"] > 0 and record["forwards"] == 0
    with pytest.raises(AssertionError, match="removed the hooks the check put") as problem:
        check_graphs_alive(record, 4)
    assert problem.value.mistake == "course_hooks_removed"
    with graphs_alive(model) as graphs:
        model(torch.randn(4, 6)).sum().backward()
    assert graphs.plain()["hooks_lost"] == 0
