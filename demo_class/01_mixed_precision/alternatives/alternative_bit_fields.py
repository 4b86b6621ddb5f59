# about: reads the exponent and mantissa bits of the cast in Exercise 1, records the audit with one global module hook filtered by identity, takes the gradients with torch.autograd.grad in Exercise 3 and answers the quick check with a capital letter
# base: solution
# %% ex1_1_solution
# (exponent mask, mantissa mask) of the 16-bit pattern of each format
_FIELDS = {torch.float16: (0x7C00, 0x03FF), torch.bfloat16: (0x7F80, 0x007F)}


def cast_fate(values, dtype):
    """One of "overflow", "underflow", "subnormal", "exact", "rounded" per value of a 1-D float32 tensor."""
    exponent_mask, mantissa_mask = _FIELDS[dtype]
    cast = values.to(dtype)
    bits = cast.view(torch.int16).to(torch.int32) & 0xFFFF
    exponent = bits & exponent_mask
    mantissa = bits & mantissa_mask
    is_inf = (exponent == exponent_mask) & (mantissa == 0)
    is_zero = (exponent == 0) & (mantissa == 0)
    is_subnormal = (exponent == 0) & (mantissa != 0)
    is_exact = cast.to(values.dtype) == values
    fates = []
    for inf, zero, sub, exact in zip(is_inf.tolist(), is_zero.tolist(), is_subnormal.tolist(), is_exact.tolist()):
        if inf:
            fates.append("overflow")
        elif zero:
            fates.append("underflow")
        elif sub:
            fates.append("subnormal")
        elif exact:
            fates.append("exact")
        else:
            fates.append("rounded")
    return fates
# %% ex2_1_solution
def autocast_audit(model, x, dtype):
    """{leaf module name: output dtype} for one forward pass of model(x) under autocast."""
    leaf_names = {}
    for name, module in model.named_modules():
        if len(module._modules) == 0:
            leaf_names.setdefault(id(module), name)
    report = {}

    def hook(module, inputs, output):
        name = leaf_names.get(id(module))
        if name is not None:
            report[name] = output.dtype    # an existing key keeps its place in the dict

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        with torch.autocast(x.device.type, dtype=dtype):
            model(x)
    finally:
        handle.remove()
    return report
# %% ex3_1_solution
def amp_train_step(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
    """One mixed-precision step with gradient scaling and clipping; returns the loss (float)."""
    params = {id(p): p for p in model.parameters()}
    params.update((id(p), p) for group in optimizer.param_groups for p in group["params"])
    params = list(params.values())
    for p in params:
        p.grad = None
    with torch.autocast(device_type=x.device.type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    trainable = [p for p in params if p.requires_grad]
    gradients = torch.autograd.grad(scaler.scale(loss), trainable, allow_unused=True)
    for p, g in zip(trainable, gradients):
        p.grad = g
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return float(loss.detach())
# %% ex4_1_solution
QUICK_CHECK = "C"
