# about: A correct solution written differently: tensor arithmetic, a context manager, model.zero_grad.
# base: solution
# loses:
# %% ex1_1_solution
def cast_fate(values, dtype):
    back = values.to(dtype).double()
    original = values.double()
    labels = []
    for before, after in zip(original, back):
        if torch.isinf(after):
            labels.append("overflow")
        elif after == 0:
            labels.append("underflow")
        elif after.abs() < torch.finfo(dtype).tiny:
            labels.append("subnormal")
        else:
            labels.append("exact" if after == before else "rounded")
    return labels


# %% ex2_1_solution
import contextlib


def autocast_audit(model, x, dtype):
    leaves = [(n, m) for n, m in model.named_modules() if len(list(m.children())) == 0]
    seen = {}
    with contextlib.ExitStack() as stack:
        for name, leaf in leaves:
            handle = leaf.register_forward_hook(lambda mod, inp, out, key=name: seen.update({key: out.dtype}))
            stack.callback(handle.remove)
        with torch.autocast(device_type=x.device.type, dtype=dtype):
            model(x)
    return seen


# %% ex3_1_solution
def amp_train_step(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
    model.zero_grad(set_to_none=True)
    with torch.amp.autocast(x.device.type, dtype=amp_dtype):
        prediction = model(x)
        loss = loss_fn(prediction, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)
    del total_norm
    scaler.step(optimizer)
    scaler.update()
    return float(loss.detach())


# %% ex4_1_solution
QUICK_CHECK = "C"
