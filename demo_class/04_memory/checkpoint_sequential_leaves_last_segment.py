# about: Uses torch.utils.checkpoint.checkpoint_sequential with ceil(len / blocks_per_segment) segments: it runs its last segment outside a checkpoint, and its segments are not blocks_per_segment long.
# base: solution
# loses: ex3_1_test
# says: some blocks ran outside a checkpoint
# %% ex3_1_solution
def checkpointed_forward(model, x, blocks_per_segment=1):
    import math
    from torch.utils.checkpoint import checkpoint_sequential
    blocks = nn.Sequential(*model.blocks)
    segments = math.ceil(len(blocks) / blocks_per_segment)
    return checkpoint_sequential(blocks, segments, x, use_reentrant=False)
