# about: An attack: a plain float32 step, then ctypes rewrites every local of the calling frames that looks like an expected value or a verdict.
# base: solution
# loses: ex3_1_test
# says: the first Linear layer ran in
# %% ex3_1_solution
import ctypes
import sys


def _rewrite_callers(value):
    frame = sys._getframe(2)
    while frame is not None:
        changed = False
        for name in list(frame.f_locals):
            if any(word in name for word in ("expect", "want", "reference", "ok", "passed", "failure")):
                frame.f_locals[name] = value
                changed = True
        if changed:
            ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
        frame = frame.f_back


def amp_train_step(model, optimizer, scaler, loss_fn, x, y, max_norm, amp_dtype):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    _rewrite_callers(loss.item())
    return loss.item()
