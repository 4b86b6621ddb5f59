# about: An attack on the outside memory measure: a cell keeps a 1 GiB tensor alive, and the loop deletes it before holding each whole cycle's graph, so the peak over the call stays below the usage the kernel had just before it.
# base: solution
# loses: ex1_1_test
# says: measured by the grader from outside your kernel
# needs: memory cgroup
# %% ex1_1_solution
import torch

ballast = {"tensor": torch.ones(2**28)}


def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    ballast.pop("tensor", None)
    cycle_losses = []
    for start in range(0, len(micro_batches), accum_steps):
        cycle = micro_batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        loss = sum(loss_fn(model(x), y) for x, y in cycle) / accum_steps
        loss.backward()
        optimizer.step()
        cycle_losses.append(loss.detach().item())
    return cycle_losses
