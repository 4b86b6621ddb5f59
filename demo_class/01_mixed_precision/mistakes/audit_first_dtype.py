# about: Records each leaf's dtype only the first time it runs, so a leaf that runs twice reports its first output's dtype, not its last.
# base: solution
# loses: ex2_1_test
# says: a leaf that runs twice reports its LAST output's dtype
# %% ex2_1_solution
def autocast_audit(model, x, dtype):
    report, handles = {}, []
    for name, module in model.named_modules():
        if not list(module.children()):
            def hook(_module, _inputs, output, name=name):
                if name not in report:
                    report[name] = output.dtype
            handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad(), torch.autocast(x.device.type, dtype=dtype):
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return report
