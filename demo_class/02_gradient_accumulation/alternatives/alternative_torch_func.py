# about: Correct, another style: each micro-batch's gradient and loss from torch.func.grad_and_value over functional_call (one forward and one backward each), summed per cycle and assigned to .grad (overwriting any old gradients) before optimizer.step().
# base: solution
# loses:
# %% ex1_1_solution
from torch.func import functional_call, grad_and_value


def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())

    def micro_loss(weights, x, y):
        return loss_fn(functional_call(model, (weights, buffers), (x,)), y) / accum_steps

    gradient_and_loss = grad_and_value(micro_loss)
    device = next(model.parameters()).device
    losses = []
    for start in range(0, len(micro_batches), accum_steps):
        summed, total = None, torch.zeros((), device=device)
        for x, y in micro_batches[start:start + accum_steps]:
            weights = {name: p.detach() for name, p in params.items()}
            grads, loss = gradient_and_loss(weights, x, y)
            summed = grads if summed is None else {n: summed[n] + grads[n] for n in summed}
            total = total + loss
        for name, p in params.items():
            p.grad = summed[name]          # replaces whatever .grad held
        optimizer.step()
        losses.append(total.item())
    return losses
