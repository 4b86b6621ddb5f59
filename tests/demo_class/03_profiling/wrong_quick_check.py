# about: Everything right except the quick check: thinks .item() copies the whole model.
# base: solution
# loses: ex5_1_test
# says: a host sync stops the CPU
# %% ex5_1_solution
QUICK_CHECK = "a"
