# about: Makes the right scaled, clipped step and then sets every parameter to NaN, returning NaN for the loss: a comparison written as abs(got - want) > tol once let it through.
# base: solution
# loses: ex3_1_test
# says: parameters after the step are not those of one SGD step
# %% ex3_1_solution
def amp_train_step(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(float("nan"))
    return float("nan")
