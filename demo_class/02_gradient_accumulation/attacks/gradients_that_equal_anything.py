# about: An attack: exercise 3 runs no backward and fills .grad with a Tensor subclass whose comparisons always say equal.
# base: solution
# loses: ex3_1_test
# says: backward ran 0 times for 4 micro-batches
# %% ex3_1_solution
import torch


class Agreeable(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("allclose", "equal", "__eq__", "isclose", "eq"):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def accumulate_token_gradients(model, micro_batches, ignore_index=-100):
    for parameter in model.parameters():
        parameter.grad = torch.zeros_like(parameter).as_subclass(Agreeable)
    return 1.0
