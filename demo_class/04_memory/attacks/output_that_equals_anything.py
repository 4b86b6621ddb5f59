# about: An attack: checkpointed_forward checkpoints nothing and returns the output as a Tensor subclass whose comparisons always say equal and whose differences are zero.
# base: solution
# loses: ex3_1_test
# says: should return the model's output, a tensor of shape
# %% ex3_1_solution
import torch


class Agreeable(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("allclose", "equal", "__eq__", "isclose", "eq"):
            return True
        if name in ("sub", "__sub__", "dist", "norm"):
            return torch.tensor(0.0)
        return super().__torch_function__(func, types, args, kwargs or {})


def checkpointed_forward(model, x, blocks_per_segment=1):
    return model(x).as_subclass(Agreeable)
