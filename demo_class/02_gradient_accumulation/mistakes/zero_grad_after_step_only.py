# about: The tutorial loop: zero_grad only right after step, never before the first cycle, so the gradients .grad held when the function was called leak into the first update.
# base: solution
# loses: ex1_1_test
# says: still holds the gradients that were in .grad before your function was called
# %% ex1_1_solution
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    losses = []
    total = 0.0
    for i, (x, y) in enumerate(micro_batches):
        loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        total = total + loss.detach()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(total.item())
            total = 0.0
    return losses
