# about: A correct solution written differently: lookup tables, a set of saved tensor ids, and a plan from the largest micro-batch that fits each way, compared.
# base: solution
# loses:
# %% ex1_1_solution
BUFFERS_PER_PARAMETER = {"sgd": 0, "sgd_momentum": 1, "adam": 2}


def predict_training_bytes(model, optimizer_name):
    def nbytes(p):
        return p.numel() * p.element_size()

    trainable = [p for p in model.parameters() if p.requires_grad]
    counters = 4 * len(trainable) if optimizer_name == "adam" else 0
    return {
        "parameters": sum(map(nbytes, model.parameters())),
        "gradients": sum(map(nbytes, trainable)),
        "optimizer": BUFFERS_PER_PARAMETER[optimizer_name] * sum(map(nbytes, trainable)) + counters,
    }


# %% ex2_1_solution
def predict_saved_bytes(model, batch_size):
    first = model[0]
    width = getattr(first, "in_features", None) or first.normalized_shape[0]
    saved = {}                      # tensor id -> bytes
    current = ("input", width)
    for index, layer in enumerate(model):
        current_bytes = batch_size * current[1] * 4
        if isinstance(layer, nn.Linear):
            saved[current[0]] = current_bytes
            current = (f"out{index}", layer.out_features)
        elif isinstance(layer, nn.ReLU):
            current = (f"out{index}", current[1])
            saved[current[0]] = current_bytes
        elif isinstance(layer, nn.GELU):
            saved[current[0]] = current_bytes
            current = (f"out{index}", current[1])
        elif isinstance(layer, nn.LayerNorm):
            saved[current[0]] = current_bytes
            saved[f"stats{index}"] = 2 * 4 * batch_size
            current = (f"out{index}", current[1])
        elif isinstance(layer, nn.Dropout):
            saved[f"mask{index}"] = current_bytes
            current = (f"out{index}", current[1])
    return sum(saved.values())


# %% ex3_1_solution
import functools


def checkpointed_forward(model, x, blocks_per_segment=1):
    blocks = list(model.blocks)
    segments = [nn.Sequential(*blocks[i:i + blocks_per_segment])
                for i in range(0, len(blocks), blocks_per_segment)]
    run = functools.partial(checkpoint, use_reentrant=False)
    return functools.reduce(lambda h, segment: run(segment, h), segments, x)


# %% ex4_1_solution
def plan_micro_batches(effective_batch, budget_bytes, measure):
    candidates = [m for m in range(1, effective_batch + 1) if effective_batch % m == 0]
    largest = {use_checkpointing: max((m for m in candidates if measure(m, use_checkpointing) <= budget_bytes),
                                      default=0)
               for use_checkpointing in (False, True)}
    use_checkpointing = largest[True] > largest[False]
    best = largest[use_checkpointing]
    if best == 0:
        raise ValueError("the budget is too small for any plan")
    return {"micro_batch": best, "accum_steps": effective_batch // best, "checkpointing": use_checkpointing}


# %% ex5_1_solution
QUICK_CHECK = "C"
