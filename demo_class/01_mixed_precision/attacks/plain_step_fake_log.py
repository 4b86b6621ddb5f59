# about: An attack: skips autocast and scaling but rewrites the kernel's spy log to look right.
# base: solution
# loses: ex3_1_test
# says: the first Linear layer ran in
# %% ex3_1_solution
def amp_train_step(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    import gc
    for obj in gc.get_objects():            # find the spies' call logs and make them look right
        if isinstance(obj, list) and obj and all(isinstance(e, str) for e in obj[:3]) and "step" in obj:
            obj[:] = ["scale", "backward", "unscale_", "clip", "step", "update"]
    return loss.item()
