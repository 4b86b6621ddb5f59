# about: Adds up each micro-batch's loss without .detach() and reads the total once per update: the right updates, losses and reads, but the running total carries every micro-batch's autograd graph, where the text asks to add up loss.detach().
# base: solution
# loses: ex1_1_test
# says: still carries the autograd graph
# %% ex1_1_solution
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    cycle_losses = []
    for index, (x, y) in enumerate(micro_batches):
        if index % accum_steps == 0:
            optimizer.zero_grad(set_to_none=True)
            cycle_loss = 0.0
        loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        cycle_loss = cycle_loss + loss
        if (index + 1) % accum_steps == 0:
            optimizer.step()
            cycle_losses.append(cycle_loss.item())
    return cycle_losses
