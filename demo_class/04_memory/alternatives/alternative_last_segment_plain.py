# about: Correct, as checkpoint_sequential does it: every segment but the last is checkpointed, the last runs plainly (its backward comes first, so rebuilding it would lower no peak), also when it is the only segment and nothing is checkpointed at all, as the spec allows.
# base: solution
# loses:
# %% ex3_1_solution
def checkpointed_forward(model, x, blocks_per_segment=1):
    blocks = list(model.blocks)
    starts = list(range(0, len(blocks), blocks_per_segment))
    h = x
    for start in starts[:-1]:
        segment = nn.Sequential(*blocks[start:start + blocks_per_segment])
        h = checkpoint(segment, h, use_reentrant=False)
    return nn.Sequential(*blocks[starts[-1]:])(h)
