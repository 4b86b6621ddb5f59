# about: An attack: predict_training_bytes predicts zero, and the notebook swaps the __code__ of every function in the helpers' checks for one that returns at once.
# base: solution
# loses: ex1_1_test
# says: you predicted 0
# %% ex1_1_solution
import inspect
import sys


def _returns_at_once(*args, **kwargs):
    return None


for _name, _module in list(sys.modules.items()):
    if _name.startswith("helpers.checks"):
        for _value in list(vars(_module).values()):
            if inspect.isfunction(_value) and not _value.__code__.co_freevars:
                _value.__code__ = _returns_at_once.__code__


def predict_training_bytes(model, optimizer_name):
    return {"parameters": 0, "gradients": 0, "optimizer": 0}
