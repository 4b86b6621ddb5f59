# about: Orders the report with a forward pre-hook on every leaf (to keep first-run order) and removes only the forward hooks afterwards: the pre-hooks stay attached to the model.
# base: solution
# loses: ex2_1_test
# says: remove your forward pre-hooks before returning
# %% ex2_1_solution
def autocast_audit(model, x, dtype):
    order, dtypes, hooks = [], {}, []
    for name, module in model.named_modules():
        if next(module.children(), None) is not None:
            continue
        module.register_forward_pre_hook(
            lambda _m, _inputs, name=name: order.append(name) if name not in order else None)
        hooks.append(module.register_forward_hook(
            lambda _m, _inputs, output, name=name: dtypes.__setitem__(name, output.dtype)))
    with torch.no_grad(), torch.autocast(x.device.type, dtype=dtype):
        model(x)
    for hook in hooks:
        hook.remove()
    return {name: dtypes[name] for name in order}
