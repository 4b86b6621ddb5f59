# about: weighs every micro-batch's gradient by its share of the cycle's samples, but logs the plain average of the micro-batch mean losses, so a cycle with a 12-sample and a 4-sample micro-batch reports the wrong loss
# base: solution
# loses: ex2_1_test
# says: return one number per update, the cycle's mean loss
# %% ex2_1_solution
def train_accumulated_any_sizes(model, optimizer, loss_fn, micro_batches, accum_steps):
    """Accumulation over micro-batches of any size and count; returns each cycle's mean loss."""
    losses = []
    for start in range(0, len(micro_batches), accum_steps):
        cycle = micro_batches[start:start + accum_steps]
        samples_in_cycle = sum(len(x) for x, _ in cycle)
        optimizer.zero_grad(set_to_none=True)
        cycle_loss = 0.0
        for x, y in cycle:
            loss = loss_fn(model(x), y)
            (loss * len(x) / samples_in_cycle).backward()
            cycle_loss += loss.detach()
        optimizer.step()
        losses.append((cycle_loss / len(cycle)).item())
    return losses
