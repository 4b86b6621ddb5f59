# about: An attack: checkpointed_forward checkpoints nothing; the cell rewrites every function of helpers.memory and of torch.autograd.graph that could count saved tensors or measure a peak so that they count nothing.
# base: solution
# loses: ex3_1_test
# says: no block ran inside a checkpoint
# %% ex3_1_solution
import contextlib

import helpers.memory
import torch.autograd.graph


@contextlib.contextmanager
def _nothing_saved(*args, **kwargs):
    yield None


for _name, _value in list(vars(helpers.memory).items()):
    if callable(_value) and not isinstance(_value, type) and not _name.startswith("__"):
        try:
            setattr(helpers.memory, _name, lambda *a, **k: 0)
        except Exception:
            pass
torch.autograd.graph.saved_tensors_hooks.__enter__ = lambda self: self
torch.autograd.graph.saved_tensors_hooks.__exit__ = lambda self, *exc: None


def checkpointed_forward(model, x, blocks_per_segment=1):
    return model(x)
