# about: An attack that combines the in-kernel evidence's known holes: a thread pool started when the cell runs trains a deep copy of the model, holding each whole cycle with autograd.grad(retain_graph=True), and the loop copies the twin's parameters back; the model's own layers see no forward at all.
# base: solution
# loses: ex1_1_test
# says: measured by the grader from outside your kernel
# needs: memory cgroup
# %% ex1_1_solution
import copy
from concurrent.futures import ThreadPoolExecutor

import torch

_pool = ThreadPoolExecutor(max_workers=1)
_pool.submit(lambda: None).result()


def _train_twin(twin, loss_fn, micro_batches, accum_steps, lr):
    cycle_losses = []
    parameters = list(twin.parameters())
    for start in range(0, len(micro_batches), accum_steps):
        cycle = micro_batches[start:start + accum_steps]
        loss = sum(loss_fn(twin(x), y) for x, y in cycle) / accum_steps
        grads = torch.autograd.grad(loss, parameters, retain_graph=True)
        with torch.no_grad():
            for parameter, grad in zip(parameters, grads):
                parameter -= lr * grad
        cycle_losses.append(float(loss.detach()))
    return cycle_losses


def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    twin = copy.deepcopy(model)
    lr = optimizer.param_groups[0]["lr"]
    cycle_losses = _pool.submit(_train_twin, twin, loss_fn, micro_batches, accum_steps, lr).result()
    with torch.no_grad():
        for mine, trained in zip(model.parameters(), twin.parameters()):
            mine.copy_(trained)
            mine.grad = None
    return cycle_losses
