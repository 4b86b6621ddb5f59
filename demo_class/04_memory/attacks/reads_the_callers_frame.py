# about: Predicts nothing: looks up the call stack for the check's expected value and returns it.
# base: solution
# loses: ex2_1_test
# says: you predicted None
# %% ex2_1_solution
import sys


def predict_saved_bytes(model, batch_size):
    frame = sys._getframe(1)
    while frame is not None:
        for name in ("want", "expected", "actual", "reference"):
            if isinstance(frame.f_locals.get(name), int):
                return frame.f_locals[name]
        frame = frame.f_back
    return None
