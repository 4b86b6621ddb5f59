# about: Correct: sums each cycle's gradients with torch.autograd.grad and assigns them to .grad before the step.
# base: solution
# %% ex1_1_solution
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    params = [p for p in model.parameters() if p.requires_grad]
    losses = []
    for start in range(0, len(micro_batches), accum_steps):
        sums = [torch.zeros_like(p) for p in params]
        total = 0.0
        for x, y in micro_batches[start:start + accum_steps]:
            loss = loss_fn(model(x), y) / accum_steps
            for s, g in zip(sums, torch.autograd.grad(loss, params)):
                s += g
            total = total + loss.detach()
        for p, s in zip(params, sums):
            p.grad = s
        optimizer.step()
        losses.append(total.item())
    return losses
