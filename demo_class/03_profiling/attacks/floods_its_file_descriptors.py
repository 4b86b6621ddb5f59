# about: Right answers, but the quick check's cell writes 3 MB to each of the kernel's file descriptors 1 and 2, with terminal escape sequences that would retitle and clear the teacher's terminal: the output is cut, nothing reaches the grader's log, grading goes on.
# base: solution
# loses:
# says: output cut
# %% ex5_1_solution
import os

os.write(1, b"\x1b]0;retitled by a student\x07" + b"o" * 3_000_000)
os.write(2, b"\x1b[2J" + b"e" * 3_000_000)
QUICK_CHECK = "a"
