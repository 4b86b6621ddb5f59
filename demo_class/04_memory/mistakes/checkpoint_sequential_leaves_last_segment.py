# about: Uses torch.utils.checkpoint.checkpoint_sequential with ceil(len / blocks_per_segment) segments: it cuts len // segments blocks per segment and gives the rest to its last segment, which it runs unchecked, so with 5 blocks in segments of 2 it rebuilds 3 blocks at once and peaks higher than segments of 2.
# base: solution
# loses: ex3_1_test
# says: its segments are not blocks_per_segment long
# %% ex3_1_solution
def checkpointed_forward(model, x, blocks_per_segment=1):
    import math
    from torch.utils.checkpoint import checkpoint_sequential
    blocks = nn.Sequential(*model.blocks)
    segments = math.ceil(len(blocks) / blocks_per_segment)
    return checkpoint_sequential(blocks, segments, x, use_reentrant=False)
