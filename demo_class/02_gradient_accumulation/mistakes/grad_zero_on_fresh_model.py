# about: Starts each cycle with p.grad.zero_() for every parameter, which fails on a fresh model whose .grad is None.
# base: solution
# loses: ex1_1_test
# says: it is None on a fresh model until the first backward
# %% ex1_1_solution
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    cycle_losses = []
    for index, (x, y) in enumerate(micro_batches):
        if index % accum_steps == 0:
            for p in model.parameters():
                p.grad.zero_()
            cycle_loss = 0.0
        loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        cycle_loss = cycle_loss + loss.detach()
        if (index + 1) % accum_steps == 0:
            optimizer.step()
            cycle_losses.append(cycle_loss.item())
    return cycle_losses
