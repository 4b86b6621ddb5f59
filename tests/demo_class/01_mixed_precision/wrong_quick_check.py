# about: Everything right except the quick check: thinks bf16 needs a scaler more than fp16.
# base: solution
# loses: ex4_1_test
# %% ex4_1_solution
QUICK_CHECK = "a"
