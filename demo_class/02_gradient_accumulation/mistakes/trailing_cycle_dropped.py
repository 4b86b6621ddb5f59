# about: The (i + 1) % accum_steps loop: the last, shorter cycle never gets its step.
# base: solution
# loses: ex2_1_test
# says: the last, shorter cycle never got its step
# %% ex2_1_solution
def train_accumulated_any_sizes(model, optimizer, loss_fn, micro_batches, accum_steps):
    losses = []
    optimizer.zero_grad(set_to_none=True)
    for i, (x, y) in enumerate(micro_batches):
        start = i - i % accum_steps
        cycle = micro_batches[start:start + accum_steps]
        samples = sum(len(cx) for cx, _ in cycle)
        if i % accum_steps == 0:
            total = 0.0
        loss = loss_fn(model(x), y) * len(x) / samples
        loss.backward()
        total += loss.item()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(total)
    return losses
