# about: Checkpoints each segment with a lambda written in the loop, lambda inp: nn.Sequential(*segment)(inp): the forward is right, but backward's recomputation calls the lambda after the loop, when `segment` is the last one, so every segment is rebuilt from the last segment's blocks (same shapes, so nothing raises) and the gradients are wrong.
# base: solution
# loses: ex3_1_test
# says: the gradients differ
# %% ex3_1_solution
def checkpointed_forward(model, x, blocks_per_segment=1):
    """model(x) for a ResidualMLP, each segment of blocks checkpointed: float [B, dim] -> [B, dim]."""
    blocks = list(model.blocks)
    h = x
    for start in range(0, len(blocks), blocks_per_segment):
        segment = blocks[start:start + blocks_per_segment]
        h = checkpoint(lambda inp: nn.Sequential(*segment)(inp), h, use_reentrant=False)
    return h
