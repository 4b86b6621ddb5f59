# about: Correct, another style: the PyTorch AMP-examples loop (zero_grad once before the loop and right after each scaler.update), torch.amp.autocast with enabled=, the cycle's detached losses kept in a list and summed with torch.stack once per update.
# base: solution
# loses:
# %% ex4_1_solution
def train_accumulated_amp(model, optimizer, scaler, loss_fn, micro_batches, accum_steps,
                          max_norm, amp_dtype=None):
    device_type = next(model.parameters()).device.type
    optimizer.zero_grad()
    pending, history = [], []
    for i, (x, y) in enumerate(micro_batches, start=1):
        with torch.amp.autocast(device_type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = loss_fn(model(x), y)
            loss = loss / accum_steps
        scaler.scale(loss).backward()
        pending.append(loss.detach())
        if i % accum_steps == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            history.append(torch.stack(pending).sum().item())
            pending.clear()
    return history
