# about: A right report, but the audit keeps it on the model (model.audit_report = report) "for later": the model no longer is as the audit found it.
# base: solution
# loses: ex2_1_test
# says: remove what your audit attached to the model
# %% ex2_1_solution
def autocast_audit(model, x, dtype):
    report, handles = {}, []
    for name, module in model.named_modules():
        if not list(module.children()):
            handles.append(module.register_forward_hook(
                lambda _m, _inputs, output, name=name: report.__setitem__(name, output.dtype)))
    try:
        with torch.no_grad(), torch.autocast(device_type=x.device.type, dtype=dtype):
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    model.audit_report = report
    return report
