# about: Calls optimizer.step() directly, so a step with inf gradients is taken anyway.
# base: solution
# loses: ex3_1_test
# says: the optimizer stepped although the gradients held inf
# %% ex3_1_solution
def amp_train_step(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
    optimizer.zero_grad()
    with torch.autocast(x.device.type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scaler.update()
    return loss.item()
