# about: An attack: compare_speed times nothing and returns ratio 1; then ctypes rewrites the locals of every calling frame that look like expected values.
# base: solution
# loses: ex1_1_test
# says: warm up both steps
# %% ex1_1_solution
import ctypes
import sys
import time


def _rewrite_callers(result):
    frame = sys._getframe(2)
    while frame is not None:
        names = [n for n in frame.f_locals if any(w in n for w in ("expect", "want", "ratio", "median"))]
        for name in names:
            frame.f_locals[name] = result["ratio"]
        if names:
            ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
        frame = frame.f_back


def compare_speed(step_a, step_b, sync, clock=time.perf_counter, repeats=11, warmup=2):
    result = {"ratio": 1.0, "low": 1.0, "high": 1.0}
    _rewrite_callers(result)
    return result
