# about: Hooks model.named_children() (tested only on a flat Sequential), so nested models report their top-level containers "0", "1" instead of the leaves "0.0", "0.1", "1.0" named as in named_modules().
# base: solution
# loses: ex2_1_test
# says: 0.0
# %% ex2_1_solution
def autocast_audit(model, x, dtype):
    report = {}
    handles = []
    for name, layer in model.named_children():
        def hook(module, inputs, output, name=name):
            report[name] = output.dtype
        handles.append(layer.register_forward_hook(hook))
    with torch.autocast(x.device.type, dtype=dtype):
        model(x)
    for handle in handles:
        handle.remove()
    return report
