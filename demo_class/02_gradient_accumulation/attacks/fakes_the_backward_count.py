# about: runs each cycle as one forward and one backward over the concatenated micro-batches (the whole cycle's activations in memory at once) and pads the backward count with zero-weighted backwards through the parameters, so the gradients, the steps and the backward tally look like accumulation
# base: solution
# loses: ex1_1_test
# says: rows at once, where the largest micro-batch holds
# %% ex1_1_solution
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    """One epoch of gradient accumulation; returns the mean loss of each cycle (floats)."""
    losses = []
    params = [p for p in model.parameters() if p.requires_grad]
    for start in range(0, len(micro_batches), accum_steps):
        cycle = micro_batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        for _ in range(len(cycle) - 1):     # backwards that touch every parameter and add nothing
            (0.0 * sum(p.sum() for p in params)).backward()
        x = torch.cat([x for x, _ in cycle])
        y = torch.cat([y for _, y in cycle])
        loss = loss_fn(model(x), y)         # equal micro-batches: the big batch's mean is the cycle's mean
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
