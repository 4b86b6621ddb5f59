# about: counts bytes with map and a table of lazy per-optimizer formulas, predicts activations by simulating the graph (each tensor gets an id, a dict of saved ids dedupes shared ones), checkpoints each segment as an nn.Sequential of its blocks, and picks the plan with next() over a generator of candidates
# base: solution

# %% ex1_1_solution
def predict_training_bytes(model, optimizer_name):
    """{"parameters", "gradients", "optimizer"}: bytes after one step of the named optimizer."""
    def size(p):
        return p.numel() * p.element_size()

    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    gradient_bytes = sum(map(size, trainable))
    state = {
        "sgd": lambda: 0,
        "sgd_momentum": lambda: gradient_bytes,                       # one buffer like each parameter
        "adam": lambda: 2 * gradient_bytes + 4 * len(trainable),      # two moments + a float32 step
    }
    if optimizer_name not in state:
        raise ValueError(f"unknown optimizer {optimizer_name!r}; expected one of {sorted(state)}")
    return {"parameters": sum(map(size, params)), "gradients": gradient_bytes, "optimizer": state[optimizer_name]()}

# %% ex2_1_solution
import itertools


def predict_saved_bytes(model, batch_size):
    """Bytes saved for backward by model(x), x float32 [batch_size, in_features], CPU, training."""
    FLOAT32 = 4
    ids = itertools.count()
    saved = {}                                   # tensor id -> bytes: a tensor saved twice is one key

    def tensor(width):
        return next(ids), batch_size * width * FLOAT32

    first = model[0]
    width = first.in_features if isinstance(first, nn.Linear) else first.normalized_shape[0]
    current = tensor(width)
    for layer in model:
        if isinstance(layer, nn.Linear):
            saved.setdefault(*current)                       # its input
            width = layer.out_features
            current = tensor(width)
        elif isinstance(layer, nn.ReLU):
            current = tensor(width)
            saved.setdefault(*current)                       # its output
        elif isinstance(layer, nn.GELU):
            saved.setdefault(*current)                       # its input
            current = tensor(width)
        elif isinstance(layer, nn.LayerNorm):
            saved.setdefault(*current)                       # its input
            saved.setdefault(*tensor(1))                     # mean, one float32 per row
            saved.setdefault(*tensor(1))                     # inverse standard deviation
            current = tensor(width)
        elif isinstance(layer, nn.Dropout):
            saved.setdefault(*tensor(width))                 # the float32 mask
            current = tensor(width)
        else:
            raise TypeError(f"no rule for {type(layer).__name__}")
    return sum(saved.values())

# %% ex3_1_solution
def checkpointed_forward(model, x, blocks_per_segment=1):
    """model(x) for a ResidualMLP, each segment of blocks checkpointed: float [B, dim] -> [B, dim]."""
    blocks = list(model.blocks)
    h = x
    for start in range(0, len(blocks), blocks_per_segment):
        segment = nn.Sequential(*blocks[start:start + blocks_per_segment])   # same modules, same weights
        h = checkpoint(segment, h, use_reentrant=False)
    return h

# %% ex4_1_solution
def plan_micro_batches(effective_batch, budget_bytes, measure):
    """{"micro_batch", "accum_steps", "checkpointing"}: the largest micro-batch whose peak fits."""
    divisors = [m for m in range(effective_batch, 0, -1) if effective_batch % m == 0]
    candidates = ((m, c) for m in divisors for c in (False, True))   # at each size, plain first
    found = next(((m, c) for m, c in candidates if measure(m, c) <= budget_bytes), None)
    if found is None:
        raise ValueError(f"nothing fits in {budget_bytes} bytes, with or without checkpointing")
    micro_batch, checkpointing = found
    return {"micro_batch": micro_batch, "accum_steps": effective_batch // micro_batch,
            "checkpointing": checkpointing}

# %% ex5_1_solution
QUICK_CHECK = "c"
