# about: Wraps the whole model in one checkpoint where the exercise asks for one per block.
# base: solution
# loses: ex3_1_test
# says: you checkpointed the whole model as one segment
# %% ex3_1_solution
def checkpointed_forward(model, x):
    return checkpoint(model, x, use_reentrant=False)
