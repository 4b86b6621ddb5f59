# about: An attack: a float32 step whose parameters become a Tensor subclass; its __torch_function__ makes every comparison say equal and every difference zero.
# base: solution
# loses: ex3_1_test
# says: the first Linear layer ran in
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


def amp_train_step(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.data = parameter.data.as_subclass(Agreeable)
            if parameter.grad is not None:
                parameter.grad = parameter.grad.as_subclass(Agreeable)
    return loss.item()
