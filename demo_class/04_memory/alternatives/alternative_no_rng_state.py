# about: A correct checkpointed_forward written as a recursion over the remaining blocks, with preserve_rng_state=False: the model has no randomness, so no checkpoint keeps the RNG state (5 KiB each on a CPU), and its peak is a little lower than the reference's.
# base: solution
# loses:
# %% ex3_1_solution
def checkpointed_forward(model, x, blocks_per_segment=1):
    def run(h, remaining):
        if not remaining:
            return h
        head = tuple(remaining[:blocks_per_segment])

        def segment(t, blocks=head):
            for block in blocks:
                t = block(t)
            return t

        h = checkpoint(segment, h, use_reentrant=False, preserve_rng_state=False)
        return run(h, remaining[blocks_per_segment:])

    return run(x, list(model.blocks))
