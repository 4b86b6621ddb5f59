# about: Divides the loss but steps after every micro-batch: small-batch training in disguise.
# base: solution
# loses: ex1_1_test
# says: optimizer.step() ran 8 times for 8 micro-batches with accum_steps=4
# %% ex1_1_solution
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    losses = []
    for x, y in micro_batches:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        optimizer.step()
        losses.append(loss.item() * accum_steps)
    return losses[::accum_steps]
