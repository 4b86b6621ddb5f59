# about: Counts 4 bytes for every value, whatever the parameters' dtype.
# base: solution
# loses: ex1_1_test
# says: not every model is float32
# %% ex1_1_solution
def predict_training_bytes(model, optimizer_name):
    parameters = sum(p.numel() * 4 for p in model.parameters())
    trained = [p for p in model.parameters() if p.requires_grad]
    gradients = sum(p.numel() * 4 for p in trained)
    state = {"sgd": 0, "sgd_momentum": gradients, "adam": 2 * gradients + 4 * len(trained)}[optimizer_name]
    return {"parameters": parameters, "gradients": gradients, "optimizer": state}
