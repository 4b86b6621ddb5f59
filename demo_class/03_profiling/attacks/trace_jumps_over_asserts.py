# about: An attack: phase_shares returns equal shares and installs trace functions (this thread and new ones) that jump over every line of the helpers that raises or asserts.
# base: solution
# loses: ex3_1_test
# says: data's share should be 0.66666667
# %% ex3_1_solution
import linecache
import sys
import threading


def _jump(frame, event, arg):
    if event == "line" and "helpers" in frame.f_code.co_filename:
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        if line.startswith(("raise", "assert")):
            try:
                frame.f_lineno += 1
            except ValueError:
                pass
    return _jump


def phase_shares(trace_path, phases):
    sys.settrace(_jump)
    threading.settrace(_jump)
    return {phase: 1 / len(phases) for phase in phases}
