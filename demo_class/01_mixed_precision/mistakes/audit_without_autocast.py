# about: Records every layer's output dtype but runs the forward pass outside autocast.
# base: solution
# loses: ex2_1_test
# says: inside torch.autocast
# %% ex2_1_solution
def autocast_audit(model, x, dtype):
    report, handles = {}, []
    for name, module in model.named_modules():
        if not list(module.children()):
            handles.append(module.register_forward_hook(
                lambda m, i, o, name=name: report.__setitem__(name, o.dtype)))
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return report
