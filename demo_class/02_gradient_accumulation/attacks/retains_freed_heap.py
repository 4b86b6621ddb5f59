# about: An attack on the outside memory measure: when its cell runs, it fills and frees 1.5 GiB of 1 MiB tensors, so the allocator keeps those pages and the kernel's memory cgroup is already high before the grader's call; the loop then holds each whole cycle's graph in that reused memory, so the peak rises little above the usage just before the call. Its Exercise 2 is left undone: the allocator may or may not still hold those pages by then, and a test of the measure must not depend on it.
# base: solution
# loses: ex1_1_test ex2_1_test
# says: measured by the grader from outside your kernel
# needs: memory cgroup
# %% ex1_1_solution
import torch

_ballast = [torch.ones(2**18) for _ in range(1536)]
del _ballast


def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    cycle_losses = []
    for start in range(0, len(micro_batches), accum_steps):
        cycle = micro_batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        loss = sum(loss_fn(model(x), y) for x, y in cycle) / accum_steps
        loss.backward()
        optimizer.step()
        cycle_losses.append(loss.detach().item())
    return cycle_losses


# %% ex2_1_solution
def train_accumulated_any_sizes(model, optimizer, loss_fn, micro_batches, accum_steps):
    raise NotImplementedError("left for later")
