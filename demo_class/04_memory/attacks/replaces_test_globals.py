# about: Predicts zero bytes and rebinds the test's `memory` module to a fake that measures zero: the grader restores it.
# base: solution
# loses: ex1_1_test
# says: you predicted 0
# %% ex1_1_solution
import types


def predict_training_bytes(model, optimizer_name):
    return {"parameters": 0, "gradients": 0, "optimizer": 0}


memory = types.SimpleNamespace(parameter_bytes=lambda model: 0, gradient_bytes=lambda model: 0,
                               optimizer_state_bytes=lambda optimizer: 0)
