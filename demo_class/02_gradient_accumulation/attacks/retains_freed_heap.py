# about: An attack on the outside memory measure: when its cell runs, it tells the allocator to serve blocks up to 64 MiB from its heap and never to give freed memory back, then fills and frees 1.5 GiB of 1 MiB tensors, so the kernel's memory cgroup is already high before the grader's call; the loop then holds each whole cycle's graph in that reused memory, so the peak rises little above the usage just before the call. The kernel holds those 1.5 GiB for the rest of the notebook, so every memory-judged exercise counts them.
# base: solution
# loses: ex1_1_test ex2_1_test ex3_1_test ex4_1_test
# says: measured by the grader from outside your kernel
# needs: memory cgroup
# %% ex1_1_solution
import ctypes

import torch

_libc = ctypes.CDLL("libc.so.6")
_libc.mallopt(-3, 64 * 2**20)       # M_MMAP_THRESHOLD: blocks up to 64 MiB come from the heap
_libc.mallopt(-1, 2**31 - 1)        # M_TRIM_THRESHOLD: never hand freed heap back
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
