# about: Everything right except the quick check: steps after every mini-batch.
# base: solution
# loses: ex5_1_test
# says: step() runs once per cycle
# %% ex5_1_solution
QUICK_CHECK = "a"
