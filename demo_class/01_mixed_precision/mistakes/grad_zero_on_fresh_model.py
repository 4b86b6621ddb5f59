# about: Clears old gradients with p.grad.zero_(), which fails on a fresh model whose .grad is None.
# base: solution
# loses: ex3_1_test
# says: it is None on a fresh model until the first backward
# %% ex3_1_solution
def amp_train_step(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
    for p in model.parameters():
        p.grad.zero_()
    with torch.autocast(x.device.type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()
