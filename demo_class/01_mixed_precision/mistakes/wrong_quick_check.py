# about: Everything right except the quick check: thinks bf16 needs a scaler more than fp16.
# base: solution
# loses: ex4_1_test
# says: only fp16 needs its gradients scaled
# validate-misses: ex4_1_test the answer key of a quick check is hidden: a visible check would give it away
# %% ex4_1_solution
QUICK_CHECK = "a"
