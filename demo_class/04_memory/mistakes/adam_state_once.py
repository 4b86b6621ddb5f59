# about: Counts one Adam buffer per parameter instead of two.
# base: solution
# loses: ex1_1_test
# says: Adam keeps two buffers per parameter
# %% ex1_1_solution
def predict_training_bytes(model, optimizer_name):
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    trained = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    state = {"sgd": 0, "sgd_momentum": trained, "adam": trained}[optimizer_name]
    return {"parameters": size, "gradients": trained, "optimizer": state}
