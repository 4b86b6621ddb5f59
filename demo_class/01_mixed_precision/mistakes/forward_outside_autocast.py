# about: Runs the forward pass in fp32 and only the loss under autocast.
# base: solution
# loses: ex3_1_test
# says: run the forward inside
# %% ex3_1_solution
def amp_train_step(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
    optimizer.zero_grad()
    logits = model(x)
    with torch.autocast(x.device.type, dtype=amp_dtype):
        loss = loss_fn(logits, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()
