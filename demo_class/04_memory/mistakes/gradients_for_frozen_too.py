# about: Counts a gradient (and optimizer state) for every parameter, frozen ones included.
# base: solution
# loses: ex1_1_test
# says: frozen parameters (requires_grad=False) get no gradient
# %% ex1_1_solution
def predict_training_bytes(model, optimizer_name):
    sizes = [p.numel() * p.element_size() for p in model.parameters()]
    parameters = sum(sizes)
    if optimizer_name == "sgd":
        state = 0
    elif optimizer_name == "sgd_momentum":
        state = parameters
    else:
        state = 2 * parameters + 4 * len(sizes)
    return {"parameters": parameters, "gradients": parameters, "optimizer": state}
