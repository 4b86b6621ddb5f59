# about: Calls scaler.step only when the clipped norm is finite, skipping an overflowed cycle itself: the same parameters and scale (unscale_ has recorded the inf, so update() still halves it), but the spec says the cycle is skipped by scaler.step, not by you.
# base: solution
# loses: ex4_1_test
# says: let it skip that step itself
# %% ex4_1_solution
def train_accumulated_amp(model, optimizer, scaler, loss_fn, micro_batches, accum_steps,
                          max_norm, amp_dtype=None):
    device_type = next(model.parameters()).device.type
    cycle_losses = []
    for index, (x, y) in enumerate(micro_batches):
        if index % accum_steps == 0:
            optimizer.zero_grad(set_to_none=True)
            cycle_loss = 0.0
        with torch.autocast(device_type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = loss_fn(model(x), y) / accum_steps
        scaler.scale(loss).backward()
        cycle_loss = cycle_loss + loss.detach()
        if (index + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)
            total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            if torch.isfinite(total_norm):       # an overflowed cycle is skipped here
                scaler.step(optimizer)
            scaler.update()
            cycle_losses.append(cycle_loss.item())
    return cycle_losses
