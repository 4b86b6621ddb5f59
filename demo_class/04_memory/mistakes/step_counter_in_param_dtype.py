# about: Counts Adam's two buffers right, and a step counter per trained tensor, but sizes the counter with the parameter's element_size(), as if it were stored in the parameter's dtype; it is a float32 scalar (4 bytes) whatever the dtype.
# base: solution
# loses: ex1_1_test
# says: float32 step counter
# %% ex1_1_solution
def predict_training_bytes(model, optimizer_name):
    """{"parameters", "gradients", "optimizer"}: bytes after one step of the named optimizer."""
    parameters = sum(p.numel() * p.element_size() for p in model.parameters())
    trained = [p for p in model.parameters() if p.requires_grad]
    gradients = sum(p.numel() * p.element_size() for p in trained)
    counters = sum(p.element_size() for p in trained)          # one scalar per tensor
    optimizer = {"sgd": 0, "sgd_momentum": gradients, "adam": 2 * gradients + counters}[optimizer_name]
    return {"parameters": parameters, "gradients": gradients, "optimizer": optimizer}
