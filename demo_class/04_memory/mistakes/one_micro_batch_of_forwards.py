# about: Predicts the forward passes of one micro-batch, recomputation included, and forgets that an update runs accum_steps of them.
# base: solution
# loses: ex6_1_test
# says: each with its own forward and backward
# %% ex6_1_solution
def predict_block_forwards(depth, blocks_per_segment, accum_steps, checkpoint_last):
    if blocks_per_segment is None:
        return depth
    sizes = [min(blocks_per_segment, depth - start) for start in range(0, depth, blocks_per_segment)]
    rebuilt = sum(sizes) if checkpoint_last else sum(sizes[:-1])
    return depth + rebuilt
