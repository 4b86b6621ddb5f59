# about: registers a forward hook on every leaf in a loop but keeps only the last handle, so it removes one hook and leaves the others attached to the model
# base: solution
# loses: ex2_1_test
# says: remove your forward hooks before returning
# %% ex2_1_solution
def autocast_audit(model, x, dtype):
    """{leaf module name: output dtype} for one forward pass of model(x) under autocast."""
    report = {}

    def make_hook(name):
        def hook(module, inputs, output):
            report[name] = output.dtype
        return hook

    for name, module in model.named_modules():
        if len(list(module.children())) == 0:
            handle = module.register_forward_hook(make_hook(name))
    with torch.autocast(x.device.type, dtype=dtype):
        model(x)
    handle.remove()
    return report
