# about: Returns the scaled loss (loss times the scale) instead of the loss.
# base: solution
# loses: ex3_1_test
# says: not scaler.scale(loss)
# %% ex3_1_solution
def amp_train_step(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return scaled.item()
