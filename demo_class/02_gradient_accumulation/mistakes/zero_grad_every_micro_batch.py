# about: Clears the gradients after every micro-batch, so each step sees only the last one.
# base: solution
# loses: ex1_1_test
# says: zero_grad() ran inside the cycle
# %% ex1_1_solution
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    losses = []
    total = 0.0
    for i, (x, y) in enumerate(micro_batches):
        loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        total += loss.item()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            losses.append(total)
            total = 0.0
        optimizer.zero_grad()
    return losses
