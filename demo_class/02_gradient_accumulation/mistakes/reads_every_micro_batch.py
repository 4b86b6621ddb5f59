# about: A correct accumulation loop that adds loss.item() for every micro-batch into a Python float: the right updates and losses, with a host read (a wait for the GPU) per micro-batch where the text asks for one per update.
# base: solution
# loses: ex1_1_test
# says: read values to the host 8 times
# %% ex1_1_solution
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    cycle_losses = []
    for index, (x, y) in enumerate(micro_batches):
        if index % accum_steps == 0:
            optimizer.zero_grad(set_to_none=True)
            cycle_loss = 0.0
        loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        cycle_loss += loss.item()
        if (index + 1) % accum_steps == 0:
            optimizer.step()
            cycle_losses.append(cycle_loss)
    return cycle_losses
