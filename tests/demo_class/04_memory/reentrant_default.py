# about: Checkpoints each block but leaves use_reentrant to its default (the reentrant version).
# base: solution
# loses: ex3_1_test
# says: use_reentrant=False
# %% ex3_1_solution
def checkpointed_forward(model, x):
    for block in model.blocks:
        x = checkpoint(block, x)
    return x
