# about: Imports checkpointing lazily inside the function, by module path, and loops with a while.
# base: solution
# loses:
# %% ex3_1_solution
import importlib


def checkpointed_forward(model, x, blocks_per_segment=1):
    """model(x) for a ResidualMLP, each segment of blocks checkpointed: float [B, dim] -> [B, dim]."""
    if blocks_per_segment < 1:
        raise ValueError(f"blocks_per_segment must be at least 1, got {blocks_per_segment}")
    ckpt = importlib.import_module("torch.utils.checkpoint")
    blocks = list(model.blocks)

    def run(h, first, last):
        for block in blocks[first:last]:
            h = block(h)
        return h

    start = 0
    while start < len(blocks):
        x = ckpt.checkpoint(run, x, start, start + blocks_per_segment, use_reentrant=False)
        start += blocks_per_segment
    return x
