# about: An attack on the outside memory measure: saved-tensor hooks write every activation of the cycle to a file under /tmp and read it back in the backward, so the process holds one tensor at a time while the whole cycle sits in files. The files are memory too (the sandbox's /tmp is a tmpfs in the kernel's memory cgroup, 256 MB): the cycle's 640 MB does not fit, torch.save fails, and the files it left count against every later memory-judged exercise.
# base: solution
# loses: ex1_1_test ex2_1_test ex3_1_test ex4_1_test
# says: the error comes from your code
# needs: memory cgroup
# %% ex1_1_solution
import itertools
import os
import tempfile

import torch

_files = itertools.count()


def _to_file(tensor):
    path = os.path.join(tempfile.gettempdir(), f"saved-{next(_files)}.pt")
    torch.save(tensor, path)
    return path


def _from_file(path):
    tensor = torch.load(path)
    os.remove(path)
    return tensor


def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    cycle_losses = []
    for start in range(0, len(micro_batches), accum_steps):
        cycle = micro_batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        with torch.autograd.graph.saved_tensors_hooks(_to_file, _from_file):
            loss = sum(loss_fn(model(x), y) for x, y in cycle) / accum_steps
        loss.backward()
        optimizer.step()
        cycle_losses.append(loss.detach().item())
    return cycle_losses
