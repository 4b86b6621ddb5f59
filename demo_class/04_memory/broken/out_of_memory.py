# about: Exercise 2 "measures" by allocating a 64 GiB buffer: the allocation fails under the grader's memory limit, the rest is graded.
# base: solution
# loses: ex2_1_test
# says: can't allocate memory
# %% ex2_1_solution
def predict_saved_bytes(model, batch_size):
    scratch = torch.empty(64 * 2**30, dtype=torch.uint8)  # room for any activation, just in case
    return scratch.numel()
