# about: Unscales and clips inside the micro-batch loop instead of once per cycle.
# base: solution
# loses: ex4_1_test
# says: clip once per cycle
# %% ex4_1_solution
def train_accumulated_amp(model, optimizer, scaler, loss_fn, micro_batches, accum_steps,
                          max_norm, amp_dtype=None):
    device_type = next(model.parameters()).device.type
    losses, total = [], 0.0
    optimizer.zero_grad()
    for i, (x, y) in enumerate(micro_batches):
        with torch.autocast(device_type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = loss_fn(model(x), y) / accum_steps
        scaler.scale(loss).backward()
        total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm * scaler.get_scale())
        if (i + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            losses.append(total)
            total = 0.0
    return losses
