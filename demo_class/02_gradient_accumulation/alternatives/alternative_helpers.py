# about: A correct solution written differently: cycles from itertools (islice, groupby), model.zero_grad, running losses as detached tensors, cross_entropy over [N, C, L], a nullcontext instead of enabled=, clip_grad_norm_ imported by name.
# base: solution
# loses:
# %% ex1_1_solution
import itertools


def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    batches = iter(micro_batches)
    losses = []
    while cycle := list(itertools.islice(batches, accum_steps)):
        model.zero_grad(set_to_none=True)
        running = torch.zeros((), device=next(model.parameters()).device)
        for x, y in cycle:
            part = loss_fn(model(x), y).div(len(cycle))
            part.backward()
            running += part.detach()
        optimizer.step()
        losses.append(running.item())
    return losses


# %% ex2_1_solution
import itertools


def train_accumulated_any_sizes(model, optimizer, loss_fn, micro_batches, accum_steps):
    def cycle_of(item):
        return item[0] // accum_steps

    losses = []
    for _, numbered in itertools.groupby(enumerate(micro_batches), key=cycle_of):
        cycle = [batch for _, batch in numbered]
        weights = [x.shape[0] for x, _ in cycle]
        samples = sum(weights)
        optimizer.zero_grad()
        running = torch.zeros((), device=next(model.parameters()).device)
        for (x, y), weight in zip(cycle, weights):
            part = loss_fn(model(x), y).mul(weight / samples)
            part.backward()
            running += part.detach()
        optimizer.step()
        losses.append(running.item())
    return losses


# %% ex3_1_solution
def accumulate_token_gradients(model, micro_batches, ignore_index=-100):
    real = torch.stack([targets.ne(ignore_index).sum() for _, targets in micro_batches]).sum()
    total_tokens = real.item()
    if total_tokens == 0:
        raise ValueError("no real target tokens in this cycle")
    summed = torch.zeros((), device=next(model.parameters()).device)
    for inputs, targets in micro_batches:
        logits = model(inputs)                                    # [sequences, length, vocab]
        per_token = F.cross_entropy(logits.transpose(1, 2), targets,  # the [N, C, L] form
                                    ignore_index=ignore_index, reduction="none")
        token_sum = per_token.sum()                               # padding contributes 0
        token_sum.div(total_tokens).backward()
        summed += token_sum.detach()
    return summed.item() / total_tokens


# %% ex4_1_solution
import contextlib
import itertools

from torch.nn.utils import clip_grad_norm_


def train_accumulated_amp(model, optimizer, scaler, loss_fn, micro_batches, accum_steps,
                          max_norm, amp_dtype=None):
    device_type = next(model.parameters()).device.type

    def precision():
        if amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device_type, dtype=amp_dtype)

    def micro_step(x, y, weight):
        with precision():
            loss = loss_fn(model(x), y) * weight
        scaler.scale(loss).backward()
        return loss.detach().float()

    def finish_cycle():
        scaler.unscale_(optimizer)
        clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()

    batches = iter(micro_batches)
    losses = []
    while cycle := list(itertools.islice(batches, accum_steps)):
        model.zero_grad(set_to_none=True)
        total = sum(micro_step(x, y, 1.0 / len(cycle)) for x, y in cycle)
        finish_cycle()
        losses.append(float(total))
    return losses


# %% ex5_1_solution
QUICK_CHECK = 'd'  # once per cycle, right after the 4th backward
