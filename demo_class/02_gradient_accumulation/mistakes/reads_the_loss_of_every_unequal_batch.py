# about: Exercise 2 right in every update, but the cycle's loss is added up with float(part) for each micro-batch: a host read (a wait for the GPU) per micro-batch, where exercise 1's rule, kept in exercise 2, allows one per update.
# base: solution
# loses: ex2_1_test
# says: read values to the host
# %% ex2_1_solution
def train_accumulated_any_sizes(model, optimizer, loss_fn, micro_batches, accum_steps):
    history = []
    for start in range(0, len(micro_batches), accum_steps):
        cycle = micro_batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        samples = sum(len(x) for x, _ in cycle)
        running = 0.0
        for x, y in cycle:
            part = loss_fn(model(x), y) * len(x) / samples
            part.backward()
            running += float(part)
        optimizer.step()
        history.append(running)
    return history
