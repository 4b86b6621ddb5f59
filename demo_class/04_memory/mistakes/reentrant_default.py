# about: Groups the blocks right but leaves use_reentrant to its default (the reentrant version).
# base: solution
# loses: ex3_1_test
# says: use_reentrant=False
# %% ex3_1_solution
def checkpointed_forward(model, x, blocks_per_segment=1):
    blocks = list(model.blocks)
    for start in range(0, len(blocks), blocks_per_segment):
        segment = nn.Sequential(*blocks[start:start + blocks_per_segment])
        x = checkpoint(segment, x)
    return x
