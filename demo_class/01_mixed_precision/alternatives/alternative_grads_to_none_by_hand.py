# about: Correct: sets every .grad to None by hand, torch.amp.autocast with keywords, clip with error_if_nonfinite=False, float(loss.detach()).
# base: solution
# %% ex3_1_solution
def amp_train_step(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
    for parameter in model.parameters():
        parameter.grad = None
    with torch.amp.autocast(device_type=x.device.type, dtype=amp_dtype):
        prediction = model(x)
        loss = loss_fn(prediction, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm, error_if_nonfinite=False)
    scaler.step(optimizer)
    scaler.update()
    return float(loss.detach())
