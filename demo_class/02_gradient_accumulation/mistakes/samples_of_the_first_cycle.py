# about: Weighs each micro-batch by len(x) over the samples of a cycle, but counts those samples once, from the first cycle ("the effective batch"), so the short last cycle (and any cycle of other sizes) is divided by the wrong total.
# base: solution
# loses: ex2_1_test
# says: points the right way but is 0.5 times
# %% ex2_1_solution
def train_accumulated_any_sizes(model, optimizer, loss_fn, micro_batches, accum_steps):
    samples_per_cycle = sum(len(x) for x, _ in micro_batches[:accum_steps])   # the effective batch
    losses = []
    for start in range(0, len(micro_batches), accum_steps):
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for x, y in micro_batches[start:start + accum_steps]:
            loss = loss_fn(model(x), y) * len(x) / samples_per_cycle
            loss.backward()
            total = total + loss.detach()
        optimizer.step()
        losses.append(float(total))
    return losses
