# about: skips frozen parameters for the gradients but sizes the optimizer state from all parameters, as if momentum buffers and Adam moments (and step counters) were kept for frozen layers too
# base: solution
# loses: ex1_1_test
# says: frozen parameters (requires_grad=False) get no gradient and no optimizer state

# %% ex1_1_solution
def predict_training_bytes(model, optimizer_name):
    """{"parameters", "gradients", "optimizer"}: bytes after one step of the named optimizer."""
    params = list(model.parameters())
    param_bytes = sum(p.numel() * p.element_size() for p in params)
    grad_bytes = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    if optimizer_name == "sgd":
        optimizer_bytes = 0
    elif optimizer_name == "sgd_momentum":
        optimizer_bytes = param_bytes                        # one buffer per parameter
    elif optimizer_name == "adam":
        optimizer_bytes = 2 * param_bytes + 4 * len(params)  # exp_avg, exp_avg_sq, step
    else:
        raise ValueError(f"unknown optimizer {optimizer_name!r}")
    return {"parameters": param_bytes, "gradients": grad_bytes, "optimizer": optimizer_bytes}
