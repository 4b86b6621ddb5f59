# about: Returns the plain model's output as a tensor subclass whose __torch_function__ would turn the collector's backward into one of its own choosing: the check reads only exact tensors and runs nothing of the student's object.
# base: solution
# loses: ex3_1_test
# says: should return the model's output, a tensor of shape
# %% ex3_1_solution
class _Quiet(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


def checkpointed_forward(model, x, blocks_per_segment=1):
    return model(x).as_subclass(_Quiet)
