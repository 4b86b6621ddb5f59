# about: Calls scaler.step but never scaler.update(), so the scale never halves after an inf and never grows.
# base: solution
# loses: ex4_1_test
# says: call scaler.update() once right after every scaler.step(optimizer)
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
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            cycle_losses.append(cycle_loss.item())
    return cycle_losses
