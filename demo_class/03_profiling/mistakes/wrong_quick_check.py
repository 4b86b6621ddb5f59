# about: Everything right except the quick check: thinks the copy of one number over PCIe is what costs the time.
# base: solution
# loses: ex5_1_test
# says: a host sync stops the CPU
# validate-misses: ex5_1_test the answer key of a quick check is hidden: a visible check would give it away
# %% ex5_1_solution
QUICK_CHECK = "b"
