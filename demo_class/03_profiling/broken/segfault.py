# about: Exercise 3 reads memory through a null pointer with ctypes: the kernel crashes in its test, the rest is graded.
# base: solution
# loses: ex3_1_test
# says: the kernel died while running this cell
# %% ex3_1_solution
import ctypes


def phase_shares(trace_path, phases):
    ctypes.string_at(0)  # a segmentation fault, as a buggy C extension would cause
