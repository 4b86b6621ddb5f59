# about: Calls scaler.step only when the clipped norm is finite, skipping an overflowed step itself: the same parameters and scale (unscale_ has recorded the inf, so update() still halves it), but the spec wants a step that scaler.step skips.
# base: solution
# loses: ex3_1_test
# says: let it skip that step itself
# %% ex3_1_solution
def amp_train_step(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if torch.isfinite(total_norm):       # an overflowed step is skipped here
        scaler.step(optimizer)
    scaler.update()
    return loss.item()
