# about: Wraps the whole model in one checkpoint, whatever blocks_per_segment says.
# base: solution
# loses: ex3_1_test
# says: you checkpointed the whole model as one segment
# %% ex3_1_solution
def checkpointed_forward(model, x, blocks_per_segment=1):
    return checkpoint(model, x, use_reentrant=False)
