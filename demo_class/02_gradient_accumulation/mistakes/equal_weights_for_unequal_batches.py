# about: Steps the short cycle but divides every loss by accum_steps, whatever the batch sizes.
# base: solution
# loses: ex2_1_test
# says: divided its micro-batch losses by accum_steps=4, but its cycle has 2
# %% ex2_1_solution
def train_accumulated_any_sizes(model, optimizer, loss_fn, micro_batches, accum_steps):
    losses = []
    for start in range(0, len(micro_batches), accum_steps):
        optimizer.zero_grad()
        total = 0.0
        for x, y in micro_batches[start:start + accum_steps]:
            loss = loss_fn(model(x), y) / accum_steps
            loss.backward()
            total += loss.item()
        optimizer.step()
        losses.append(total)
    return losses
