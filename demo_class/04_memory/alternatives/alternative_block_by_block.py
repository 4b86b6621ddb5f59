# about: A correct prediction written block by block: each block runs once, and once more when its segment is checkpointed; a float result.
# base: solution
# loses:
# %% ex6_1_solution
def predict_block_forwards(depth, blocks_per_segment, accum_steps, checkpoint_last):
    per_segment = blocks_per_segment or depth
    last_segment_starts = (depth - 1) // per_segment * per_segment
    per_micro_batch = 0.0
    for block in range(depth):
        checkpointed = blocks_per_segment is not None and (checkpoint_last or block < last_segment_starts)
        per_micro_batch += 2 if checkpointed else 1
    return per_micro_batch * accum_steps
