# about: Unscales, clips and steps in the right order, but clips with clip_grad_value_ (each entry to at most max_norm) instead of clipping the gradient's norm.
# base: solution
# loses: ex3_1_test
# says: you clipped with clip_grad_value_
# %% ex3_1_solution
def amp_train_step(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()
