# about: Never divides the micro-batch losses by accum_steps: every update is 4 times too large.
# base: solution
# loses: ex1_1_test
# says: 4x too large
# %% ex1_1_solution
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    losses = []
    optimizer.zero_grad()
    total = 0.0
    for i, (x, y) in enumerate(micro_batches):
        loss = loss_fn(model(x), y)
        loss.backward()
        total += loss.item() / accum_steps
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
            losses.append(total)
            total = 0.0
    return losses
