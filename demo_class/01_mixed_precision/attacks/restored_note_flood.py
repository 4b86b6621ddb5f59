# about: Right answers, but the quick check's cell adds twenty attributes with names of 100,000 characters to a class of helpers: the grader takes them away and says so in a note of a few short names.
# base: solution
# loses:
# says: and 12 more
# %% ex4_1_solution
from helpers.transport import remote

for _number in range(20):
    setattr(remote.Raised, str(_number) * 100_000, 1)
QUICK_CHECK = "c"
