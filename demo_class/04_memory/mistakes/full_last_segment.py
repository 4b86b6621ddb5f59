# about: Counts every rebuilt segment as blocks_per_segment blocks long, although the last one holds only the blocks that are left.
# base: solution
# loses: ex6_1_test
# says: the last segment holds only the blocks that are left
# %% ex6_1_solution
import math


def predict_block_forwards(depth, blocks_per_segment, accum_steps, checkpoint_last):
    if blocks_per_segment is None:
        return accum_steps * depth
    segments = math.ceil(depth / blocks_per_segment)
    rebuilt_segments = segments if checkpoint_last else segments - 1
    return accum_steps * (depth + rebuilt_segments * blocks_per_segment)
