# about: An attack: saves_the_cycle_on_cpu's loop, whole cycles held at once under save_on_cpu(), after it has cleared the forward hooks and pre-hooks of every module of the model it was handed, which the count of graphs alive at once reads. The updates are right and the meter sees nothing under save_on_cpu, but the count notices its hooks are gone.
# base: solution
# loses: ex1_1_test
# says: removed the hooks the check put on the model's layers
# %% ex1_1_solution
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    for module in model.modules():
        module._forward_hooks.clear()
        module._forward_pre_hooks.clear()
    cycle_losses = []
    for start in range(0, len(micro_batches), accum_steps):
        cycle = micro_batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        with torch.autograd.graph.save_on_cpu():
            loss = sum(loss_fn(model(x), y) for x, y in cycle) / accum_steps
        loss.backward()
        optimizer.step()
        cycle_losses.append(loss.detach().item())
    return cycle_losses
