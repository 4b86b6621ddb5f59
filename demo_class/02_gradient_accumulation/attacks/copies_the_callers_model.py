# about: An attack: trains nothing; walks the call stack for a model of the same shape (the test's reference) and copies its parameters, and for a list of floats to return as the losses.
# base: solution
# loses: ex1_1_test
# says: backward ran 0 times for 8 micro-batches
# %% ex1_1_solution
import sys

import torch


def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    shapes = [p.shape for p in model.parameters()]
    losses = []
    frame = sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, torch.nn.Module) and value is not model and \
                    [p.shape for p in value.parameters()] == shapes:
                with torch.no_grad():
                    for mine, theirs in zip(model.parameters(), value.parameters()):
                        mine.copy_(theirs)
            if isinstance(value, list) and value and all(isinstance(v, float) for v in value):
                losses = list(value)
        frame = frame.f_back
    return losses
