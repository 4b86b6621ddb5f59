# about: Casts the model to the audit dtype "so every layer really runs in it", and casts it back to float32 afterwards: the report is right, but every parameter is now rounded to 16 bits.
# base: solution
# loses: ex2_1_test
# says: rounded the parameters to torch.bfloat16
# %% ex2_1_solution
def autocast_audit(model, x, dtype):
    report = {}
    handles = []
    for name, module in model.named_modules():
        if not list(module.children()):
            handles.append(module.register_forward_hook(
                lambda _module, _inputs, output, name=name: report.__setitem__(name, output.dtype)))
    model.to(dtype)                     # make sure every layer runs in the low dtype
    try:
        with torch.autocast(x.device.type, dtype=dtype):
            model(x)
    finally:
        model.to(torch.float32)         # put the model back as it was
        for handle in handles:
            handle.remove()
    return report
