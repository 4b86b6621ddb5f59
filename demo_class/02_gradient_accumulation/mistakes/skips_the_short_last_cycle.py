# about: Runs only the full cycles and leaves the last, shorter one out entirely (no forward, no backward, no step), believing a partial cycle is not worth an update.
# base: solution
# loses: ex2_1_test
# says: never ran or got its step
# %% ex2_1_solution
def train_accumulated_any_sizes(model, optimizer, loss_fn, micro_batches, accum_steps):
    losses = []
    full_cycles = len(micro_batches) // accum_steps
    for start in range(0, full_cycles * accum_steps, accum_steps):
        cycle = micro_batches[start:start + accum_steps]
        samples = sum(len(x) for x, _ in cycle)
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for x, y in cycle:
            loss = loss_fn(model(x), y) * (len(x) / samples)
            loss.backward()
            total += loss.detach()
        optimizer.step()
        losses.append(float(total))
    return losses
