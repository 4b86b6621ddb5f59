# about: A correct solution written differently: nested torch.where over the whole tensor, a global forward hook under inference_mode, p.grad = None, a loss helper and clipping in two steps (get_total_norm, clip_grads_with_norm_).
# base: solution
# loses:
# %% ex1_1_solution
FATES = ("overflow", "underflow", "subnormal", "exact", "rounded")


def cast_fate(values, dtype):
    back = values.to(dtype).to(values.dtype)
    smallest_normal = torch.finfo(dtype).smallest_normal
    # One code per value, in the order the categories are checked: the first true condition wins.
    codes = torch.where(
        torch.isinf(back) & torch.isfinite(values), 0,
        torch.where(back == 0, 1,
                    torch.where(back.abs() < smallest_normal, 2,
                                torch.where(back == values, 3, 4))))
    return [FATES[code] for code in codes.tolist()]


# %% ex2_1_solution
from torch.nn.modules.module import register_module_forward_hook


def autocast_audit(model, x, dtype):
    leaf_names = {id(module): name for name, module in model.named_modules() if not list(module.children())}
    dtypes = {}

    def remember(module, _inputs, output):
        name = leaf_names.get(id(module))
        if name is not None:
            dtypes[name] = output.dtype

    handle = register_module_forward_hook(remember)
    try:
        with torch.inference_mode(), torch.autocast(device_type=x.device.type, dtype=dtype):
            model(x)
    finally:
        handle.remove()
    return dtypes


# %% ex3_1_solution
def _autocast_loss(model, loss_fn, x, y, amp_dtype):
    with torch.autocast(device_type=x.device.type, dtype=amp_dtype):
        return loss_fn(model(x), y)


def amp_train_step(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
    for parameter in model.parameters():
        parameter.grad = None
    loss = _autocast_loss(model, loss_fn, x, y, amp_dtype)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    parameters = list(model.parameters())
    total_norm = torch.nn.utils.get_total_norm([p.grad for p in parameters if p.grad is not None])
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach().float().item()


# %% ex4_1_solution
QUICK_CHECK = 'c'  # range comes from the exponent bits, and bf16 has fp32's eight
