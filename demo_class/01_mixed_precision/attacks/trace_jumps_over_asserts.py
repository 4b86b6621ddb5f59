# about: An attack: returns an empty audit and installs a trace function (in this thread and every new one) that jumps over each line of the checks that raises or asserts.
# base: solution
# loses: ex2_1_test
# says: should name the leaf modules
# %% ex2_1_solution
import sys
import threading


def _jump_over_failures(frame, event, arg):
    if "helpers" not in frame.f_code.co_filename:
        return _jump_over_failures
    if event == "line":
        import linecache
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        if line.startswith(("raise", "assert")):
            try:
                frame.f_lineno = frame.f_lineno + 1
            except ValueError:
                pass
    return _jump_over_failures


def autocast_audit(model, x, dtype):
    sys.settrace(_jump_over_failures)
    threading.settrace(_jump_over_failures)
    return {}
