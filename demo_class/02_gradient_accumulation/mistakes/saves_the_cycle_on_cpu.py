# about: Builds each cycle's whole graph inside torch.autograd.graph.save_on_cpu() and runs one backward per cycle: the right updates, and a saved-tensor meter that sees nothing, but the cycle's activations are all held at once.
# base: solution
# loses: ex1_1_test
# says: forward passes at once
# %% ex1_1_solution
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    cycle_losses = []
    for start in range(0, len(micro_batches), accum_steps):
        cycle = micro_batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        with torch.autograd.graph.save_on_cpu():
            loss = sum(loss_fn(model(x), y) for x, y in cycle) / accum_steps
        loss.backward()
        optimizer.step()
        cycle_losses.append(loss.item())
    return cycle_losses
