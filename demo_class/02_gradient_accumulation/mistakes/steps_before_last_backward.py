# about: Steps when the cycle's last micro-batch arrives but before its backward, so each step misses one micro-batch's gradient.
# base: solution
# loses: ex1_1_test
# says: step only after the last backward of the cycle
# %% ex1_1_solution
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    losses = []
    for index, (x, y) in enumerate(micro_batches):
        if index % accum_steps == 0:
            optimizer.zero_grad(set_to_none=True)
            cycle_loss = 0.0
        loss = loss_fn(model(x), y) / accum_steps
        if (index + 1) % accum_steps == 0:
            optimizer.step()
        loss.backward()
        cycle_loss += loss.item()
        if (index + 1) % accum_steps == 0:
            losses.append(cycle_loss)
    return losses
