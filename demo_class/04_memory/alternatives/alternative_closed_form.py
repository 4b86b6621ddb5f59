# about: Correct, a closed form: divmod gives the last segment's length (the remainder, or a full segment), every block is rebuilt once except the last segment's when it runs plainly; None rebuilds nothing.
# base: solution
# loses:
# %% ex6_1_solution
def predict_block_forwards(depth, blocks_per_segment, accum_steps, checkpoint_last):
    """Block forwards that start in one update: ints (blocks_per_segment may be None) -> int."""
    if blocks_per_segment is None:
        rebuilt = 0
    else:
        _, rest = divmod(depth, blocks_per_segment)
        last = rest or min(blocks_per_segment, depth)
        rebuilt = depth if checkpoint_last else depth - last
    return accum_steps * (depth + rebuilt)
