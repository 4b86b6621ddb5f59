# about: Calls scaler.update() after every micro-batch: torch stops with "No inf checks were recorded prior to update", and the test says what the course says.
# base: solution
# loses: ex4_1_test
# says: update the scale once per optimizer step, right after scaler.step(optimizer)
# %% ex4_1_solution
def train_accumulated_amp(model, optimizer, scaler, loss_fn, micro_batches, accum_steps,
                          max_norm, amp_dtype=None):
    device_type = next(model.parameters()).device.type
    losses, total = [], 0.0
    for i, (x, y) in enumerate(micro_batches):
        if i % accum_steps == 0:
            optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = loss_fn(model(x), y) / accum_steps
        scaler.scale(loss).backward()
        total = total + loss.detach()
        if (i + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            losses.append(total.item())
            total = 0.0
        scaler.update()
    return losses
