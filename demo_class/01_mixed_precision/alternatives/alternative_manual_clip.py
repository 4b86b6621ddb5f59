# about: Correct, unusual: clears grads with zero_grad(), clips by hand with the total norm, returns float(loss).
# base: solution
# loses:
# %% ex3_1_solution
def amp_train_step(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
    for p in model.parameters():
        p.grad = None
    with torch.autocast(device_type=x.device.type, dtype=amp_dtype):
        out = model(x)
        loss = loss_fn(out, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    factor = max_norm / (total + 1e-6)
    if factor < 1:
        for g in grads:
            g.mul_(factor)
    scaler.step(optimizer)
    scaler.update()
    return float(loss)
