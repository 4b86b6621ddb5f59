"""Unit tests of helpers.checks: reference runs and the diagnoses of classic accumulation mistakes.

Each test runs a small hand-written training loop (a correct one or one with a classic mistake)
under helpers.spies.record and checks what helpers.checks makes of it.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import checks
from helpers.checks import (
    CycleReference,
    Reference,
    check_amp_calls,
    check_token_gradients,
    check_updates,
    first_linear_dtypes,
    reference_run,
    student_code,
    token_references,
)
from helpers.data import lm_batch, make_blobs, make_token_sequences, split_by_sizes, split_micro_batches
from helpers.grads import (
    clone_model,
    compare,
    fill_grads,
    full_batch_gradients,
    global_grad_norm,
    grad_snapshot,
    param_snapshot,
)
from helpers.models import MLP, TinyLM
from helpers.spies import record

LR = 0.5
K = 4


@pytest.fixture(autouse=True, scope="module")
def single_thread():
    """The models are tiny: extra intra-op threads only fight each other (3x slower on 2 cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
    (one_backward_per_cycle, 8, "backward() ran"),
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
    with pytest.raises(AssertionError, match=r"backward\(\) ran 2 times for 8 micro-batches"):
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
    with pytest.raises(AssertionError, match="differs from the full-batch gradient of its cycle"):
        check_updates(log, reference)

    log, reference, sizes, losses, model = run(correct_loop, equal_batches())
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    with pytest.raises(AssertionError, match="the gradients were right but the final parameters are not"):
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
    total = 0.0
    for inputs, targets in micro_batches:
        loss_sum = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten(),
                                   ignore_index=ignore_index, reduction="sum")
        (loss_sum / tokens).backward()
        total += loss_sum.item()
    return total / tokens


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


# ---------------------------------------------------------------------------------------------
# first_linear_dtypes
# ---------------------------------------------------------------------------------------------

def test_first_linear_dtypes_sees_autocast_and_removes_hook():
    model = MLP(6, 8, 3, seed=44)
    x, _ = make_blobs(4, 6, 3)
    first = model.layers[0]
    with first_linear_dtypes(model) as dtypes:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)
        assert dtypes == [torch.bfloat16]
        model(x)
    assert dtypes == [torch.bfloat16, torch.float32]
    assert not first._forward_hooks
    model(x)
    assert dtypes == [torch.bfloat16, torch.float32]


def test_first_linear_dtypes_removes_hook_on_error():
    model = MLP(6, 8, 3)
    with pytest.raises(RuntimeError, match="boom"), first_linear_dtypes(model):
        raise RuntimeError("boom")
    assert not model.layers[0]._forward_hooks


def test_first_linear_dtypes_needs_a_linear_layer():
    with pytest.raises(ValueError, match="at least one nn.Linear"), \
            first_linear_dtypes(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())):
        pass


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
# student_code: stderr on stdout, and torch's errors named in the course's words
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


@pytest.mark.parametrize(("loop", "phrase"), [
    (amp_update_every_micro_batch, "update the scale once per optimizer step, right after scaler.step"),
    (amp_unscale_every_micro_batch, "scaler.unscale_(optimizer) ran twice in one cycle"),
])
def test_student_code_names_gradscaler_errors(loop, phrase):
    with pytest.raises(AssertionError) as problem, student_code("train_accumulated_amp"):
        run_amp(loop)
    assert phrase in str(problem.value) and "train_accumulated_amp stopped with" in str(problem.value)


def test_student_code_names_an_empty_cycle_only_when_told_the_sizes():
    def divides_by_an_empty_cycle():
        return 1 / sum(len(x) for x in [])

    with pytest.raises(AssertionError, match="one more, empty cycle"), \
            student_code("train_accumulated_any_sizes", num_micro_batches=10, accum_steps=5):
        divides_by_an_empty_cycle()
    with pytest.raises(ZeroDivisionError), student_code("train_accumulated_any_sizes"):
        divides_by_an_empty_cycle()


def test_student_code_names_an_ignore_index_not_passed_on():
    logits, targets = torch.randn(3, 5), torch.tensor([1, -1, 2])
    with pytest.raises(AssertionError, match="pass ignore_index=ignore_index on"), \
            student_code("accumulate_token_gradients", ignore_index=-1):
        F.cross_entropy(logits, targets)
    with pytest.raises(IndexError), student_code("accumulate_token_gradients", ignore_index=-7):
        F.cross_entropy(logits, targets)


def test_student_code_lets_other_errors_through_unchanged():
    with pytest.raises(NotImplementedError), student_code("train_accumulated"):
        raise NotImplementedError("replace this line with your solution")
    with pytest.raises(RuntimeError, match="some other error"), student_code("train_accumulated"):
        raise RuntimeError("some other error")
    with pytest.raises(AssertionError, match="^a student's own assert$"), student_code("train_accumulated"):
        raise AssertionError("a student's own assert")


def test_student_code_keeps_stderr_empty_for_a_student_who_warns(capsys):
    import sys
    import warnings

    def chatty_loop(model, optimizer, batches, accum_steps):
        warnings.warn("a harmless warning from the student's code", UserWarning, stacklevel=1)
        print("a note on stderr", file=sys.stderr)
        return correct_loop(model, optimizer, batches, accum_steps)

    batches = equal_batches()
    model = MLP(6, 8, 3, seed=11)
    reference = reference_run(model, F.cross_entropy, cycles_of(batches, K), lr=LR)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    with record(model=model, optimizer=optimizer) as log, student_code("train_accumulated"):
        losses = chatty_loop(model, optimizer, batches, K)
    check_updates(log, reference, losses, final_params=param_snapshot(model))
    shown = capsys.readouterr()
    assert shown.err == ""
    assert "a harmless warning from the student's code" in shown.out and "a note on stderr" in shown.out


# ---------------------------------------------------------------------------------------------
# Lesson 01: running (stderr, errors in the course's words), the audit and AMP-step checks
# ---------------------------------------------------------------------------------------------

def test_running_keeps_stderr_empty_for_a_student_who_warns(capsys):
    import sys
    import warnings

    def chatty_cast_fate(values, dtype):
        warnings.warn("a harmless warning from the student's code", UserWarning, stacklevel=1)
        print("a note on stderr", file=sys.stderr)
        return ["exact"] * len(values)

    with checks.running("cast_fate", checks.CAST_FATE_ERRORS):
        fates = chatty_cast_fate(torch.tensor([1.0, 2.0]), torch.float16)
    assert fates == ["exact", "exact"]
    shown = capsys.readouterr()
    assert shown.err == ""
    assert "a harmless warning from the student's code" in shown.out and "a note on stderr" in shown.out


def test_amp_step_check_passes_a_student_who_warns_without_stderr(capsys):
    import sys
    import warnings

    x, y = make_blobs(32, 6, 3, seed=31)
    model = MLP(6, 8, 3, seed=32)
    reference = checks.amp_reference_step(model, F.cross_entropy, x, y, 0.05, torch.float16, 1024.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with record(model=model, optimizer=optimizer, scaler=scaler) as log, \
            checks.running("amp_train_step", checks.AMP_STEP_ERRORS):
        warnings.warn("the student's own warning", UserWarning, stacklevel=1)
        print("the student's stderr", file=sys.stderr)
        amp_step(model, optimizer, scaler, x, y, 0.05, torch.float16)
    checks.check_amp_calls(log, num_micro_batches=1, num_updates=1)
    checks.check_amp_step_gradient(log.of("step")[0].info["grads"], reference, 0.05)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("raise_it", "phrase"), [
    (lambda: bool(torch.ones(2) == torch.ones(2)), "decide the fate of one value at a time"),
    (lambda: torch.ones(3).item(), "on the whole tensor"),
    (lambda: (1.0).to(torch.float16), "cast the whole tensor first"),
])
def test_running_names_cast_fate_errors(raise_it, phrase):
    with pytest.raises(AssertionError, match=phrase), checks.running("cast_fate", checks.CAST_FATE_ERRORS):
        raise_it()


def test_running_passes_not_implemented_and_unknown_errors_through():
    with pytest.raises(NotImplementedError), checks.running("cast_fate", checks.CAST_FATE_ERRORS):
        raise NotImplementedError()
    with pytest.raises(KeyError), checks.running("cast_fate", checks.CAST_FATE_ERRORS):
        raise KeyError("something else")


def amp_step(model, optimizer, scaler, x, y, max_norm, amp_dtype, *, zero=True, loss_inside=True,
             clip=True, unscale_twice=False, scaled=True):
    """A mixed-precision step, correct by default; each flag makes one classic mistake."""
    if zero:
        optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=amp_dtype):
        output = model(x)
        loss = F.cross_entropy(output, y) if loss_inside else None
    loss = F.cross_entropy(output, y) if loss is None else loss
    (scaler.scale(loss) if scaled else loss).backward()
    scaler.unscale_(optimizer)
    if unscale_twice:
        scaler.unscale_(optimizer)
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


@pytest.mark.parametrize(("mistake", "phrase"), [
    ({}, None),
    ({"zero": False}, "clear old gradients first"),
    ({"loss_inside": False}, "loss computed outside torch.autocast"),
    ({"clip": False}, "was not clipped to max_norm=0.05"),
])
@pytest.mark.parametrize("amp_dtype", [torch.float16, torch.bfloat16])
def test_check_amp_step_gradient_names_the_mistake(mistake, phrase, amp_dtype):
    x, y = make_blobs(32, 6, 3, seed=31)
    model = MLP(6, 8, 3, seed=32)
    reference = checks.amp_reference_step(model, F.cross_entropy, x, y, 0.05, amp_dtype, 1024.0)
    assert param_snapshot(model).keys() == reference.grads.keys()
    assert all(p.grad is None for p in model.parameters()), "the reference must not touch the model"
    for parameter in model.parameters():
        parameter.grad = torch.full_like(parameter, 5.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with record(model=model, optimizer=optimizer, scaler=scaler) as log:
        loss = amp_step(model, optimizer, scaler, x, y, 0.05, amp_dtype, **mistake)
    candidate = log.of("step")[0].info["grads"]
    if phrase is None:
        checks.check_amp_step_gradient(candidate, reference, 0.05, stale=5.0, scale=1024.0)
        assert loss == reference.loss
    else:
        with pytest.raises(AssertionError, match=phrase):
            checks.check_amp_step_gradient(candidate, reference, 0.05, stale=5.0, scale=1024.0)


def test_check_amp_step_gradient_names_gradients_cleared_before_step():
    x, y = make_blobs(32, 6, 3, seed=31)
    model = MLP(6, 8, 3, seed=32)
    reference = checks.amp_reference_step(model, F.cross_entropy, x, y, 0.05, torch.float16, 1024.0)
    with pytest.raises(AssertionError, match="cleared between backward and step"):
        checks.check_amp_step_gradient({n: None for n in reference.grads}, reference, 0.05)


@pytest.mark.parametrize(("mistake", "phrase"), [
    ({"unscale_twice": True}, "ran twice in one step"),
    ({"scaled": False}, "not loss.backward()"),
])
def test_running_names_gradscaler_errors_of_one_step(mistake, phrase):
    x, y = make_blobs(32, 6, 3, seed=31)
    model = MLP(6, 8, 3, seed=32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with pytest.raises(AssertionError, match=phrase), \
            checks.running("amp_train_step", checks.AMP_STEP_ERRORS):
        amp_step(model, optimizer, scaler, x, y, 0.05, torch.float16, **mistake)


def test_reused_leaf_model_records_last_dtype_in_first_place():
    model = checks.replay(checks.ReusedLeafModel(8), torch.randn(3, 8), torch.bfloat16)
    assert list(model.ran) == ["act", "lin"] and model.calls == 1
    assert model.first["act"] == torch.float32 and model.ran["act"] == torch.bfloat16
    checks.check_audit(dict(model.ran), model.ran, "probe", first=model.first)


@pytest.mark.parametrize(("report", "phrase"), [
    ({"act": torch.float32, "lin": torch.bfloat16}, "reports its LAST output's dtype"),
    ({"lin": torch.bfloat16, "act": torch.bfloat16}, "keeps the place of its first run"),
    ({"act": torch.bfloat16, "lin": torch.bfloat16, "unused": None}, "only those that ran"),
    ({"act": torch.float32, "lin": torch.float32}, "inside torch.autocast"),
    ({"act": "torch.bfloat16", "lin": "torch.bfloat16"}, "map each leaf's name to the torch.dtype"),
    ([("act", torch.bfloat16)], "should return a dict"),
])
def test_check_audit_names_the_clause(report, phrase):
    model = checks.replay(checks.ReusedLeafModel(8), torch.randn(3, 8), torch.bfloat16)
    with pytest.raises(AssertionError, match=phrase):
        checks.check_audit(report, model.ran, "probe", first=model.first)


def test_check_audit_left_no_trace():
    model = nn.Sequential(nn.Linear(4, 4))
    before = param_snapshot(model)
    checks.check_audit_left_no_trace(model, before)
    handle = model[0].register_forward_hook(lambda *args: None)
    with pytest.raises(AssertionError, match="remove your forward hooks"):
        checks.check_audit_left_no_trace(model, before)
    handle.remove()
    with torch.no_grad():
        model[0].weight.add_(1.0)
    with pytest.raises(AssertionError, match="the parameters changed"):
        checks.check_audit_left_no_trace(model, before)


def fates_reference(values, dtype):
    cast = values.to(dtype).float()
    normal = torch.finfo(dtype).smallest_normal
    return ["overflow" if c.isinf() else "underflow" if c == 0 else "subnormal" if c.abs() < normal
            else "exact" if c == v else "rounded" for v, c in zip(values, cast, strict=True)]


def test_check_cast_fate_passes_the_reference_and_prints_values_exactly(capsys):
    values = torch.tensor([1.0, 70000.0, 1e-8, 2.0 ** -24, 2.0 ** -14 * (1 - 2.0 ** -12)])
    checks.check_cast_fate(fates_reference, values, fates_reference)
    checks.check_cast_fate(fates_reference, values, fates_reference, unseen=True)

    def exact_before_subnormal(values, dtype):
        return ["exact" if f == "subnormal" and v.to(dtype).float() == v else f
                for v, f in zip(values, fates_reference(values, dtype), strict=True)]

    with pytest.raises(AssertionError, match=r"5.96046448e-08 should be 'subnormal', your function says"):
        checks.check_cast_fate(exact_before_subnormal, values, fates_reference)
    with pytest.raises(AssertionError, match="one string per value"):
        checks.check_cast_fate(lambda values, dtype: "exact", values, fates_reference, unseen=True)


def test_check_autocast_audit_with_a_reference_and_the_reused_leaf_model():
    def audit(model, x, dtype):
        report, handles = {}, []
        for name, module in model.named_modules():
            if not list(module.children()):
                handles.append(module.register_forward_hook(
                    lambda _m, _i, out, name=name: report.__setitem__(name, out.dtype)))
        with torch.no_grad(), torch.autocast(x.device.type, dtype=dtype):
            model(x)
        for handle in handles:
            handle.remove()
        return report

    def replay_sequential(sequential, x, dtype):
        return {name: dtype for name, _ in sequential.named_children()}     # Linear layers only

    x = torch.randn(3, 8)
    assert checks.check_autocast_audit(audit, nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)), x,
                                       torch.bfloat16, "two layers", replay_sequential) == {
        "0": torch.bfloat16, "1": torch.bfloat16}
    assert checks.check_autocast_audit(audit, checks.ReusedLeafModel(8), x, torch.float16, "reused") == {
        "act": torch.float16, "lin": torch.float16}

    def audit_twice(model, x, dtype):
        audit(model, x, dtype)
        return audit(model, x, dtype)

    with pytest.raises(AssertionError, match="ran the model 2 times"):
        checks.check_autocast_audit(audit_twice, checks.ReusedLeafModel(8), x, torch.float16, "reused")


def test_check_amp_train_step_and_skips_inf():
    x, y = make_blobs(32, 6, 3, seed=31)

    def correct(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
        return amp_step(model, optimizer, scaler, x, y, max_norm, amp_dtype)

    def optimizer_step_directly(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        optimizer.step()
        return loss.item()

    log = checks.check_amp_train_step(correct, 32, x, y, 0.05, torch.bfloat16)
    assert log.count("scaler_step") == 1
    checks.check_amp_step_skips_inf(correct, x, y)
    with pytest.raises(AssertionError, match="stepped although the gradients held inf"):
        checks.check_amp_step_skips_inf(optimizer_step_directly, x, y)
