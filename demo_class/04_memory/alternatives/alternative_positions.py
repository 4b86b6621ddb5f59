# about: A correct solution written differently: match and Tensor.nbytes, a set of saved positions in the layer chain, segment closures from a factory, divisor pairs and next() over candidate plans; its functions warn and print notes to stderr while tested, which must fail neither Validate nor grading.
# base: solution
# loses:
# %% ex1_1_solution
import sys
import warnings


def predict_training_bytes(model, optimizer_name):
    warnings.warn("predicting from the parameters only; buffers are not counted", UserWarning)
    match optimizer_name:
        case "sgd":
            buffers, counter_bytes = 0, 0
        case "sgd_momentum":
            buffers, counter_bytes = 1, 0
        case "adam":
            buffers, counter_bytes = 2, torch.float32.itemsize
        case _:
            raise ValueError(f"unknown optimizer {optimizer_name!r}")
    totals = dict.fromkeys(("parameters", "gradients", "optimizer"), 0)
    for parameter in model.parameters():
        totals["parameters"] += parameter.nbytes
        if parameter.requires_grad:
            totals["gradients"] += parameter.nbytes
            totals["optimizer"] += buffers * parameter.nbytes + counter_bytes
    return totals


# %% ex2_1_solution
def predict_saved_bytes(model, batch_size):
    print(f"note: predicting {len(model)} layers at batch {batch_size}", file=sys.stderr)
    layers = list(model)
    value_bytes = torch.float32.itemsize
    # widths[k] is the width of the tensor entering layer k; widths[-1] is the model's output.
    first = layers[0]
    widths = [first.in_features if isinstance(first, nn.Linear) else first.normalized_shape[0]]
    for layer in layers:
        widths.append(layer.out_features if isinstance(layer, nn.Linear) else widths[-1])
    saved_positions = set()           # a tensor saved by two layers is one position
    extra = 0                         # what is not a tensor of the chain: masks and statistics
    for position, layer in enumerate(layers):
        if isinstance(layer, (nn.Linear, nn.GELU, nn.LayerNorm)):
            saved_positions.add(position)            # its input
        elif isinstance(layer, nn.ReLU):
            saved_positions.add(position + 1)        # its output
        elif isinstance(layer, nn.Dropout):
            extra += batch_size * widths[position] * value_bytes
        if isinstance(layer, nn.LayerNorm):
            extra += 2 * batch_size * value_bytes
    return extra + sum(batch_size * widths[p] * value_bytes for p in saved_positions)


# %% ex3_1_solution
def checkpointed_forward(model, x, blocks_per_segment=1):
    warnings.warn(f"checkpointing in segments of {blocks_per_segment}", RuntimeWarning)
    def make_segment(blocks):
        def segment(h):
            for block in blocks:
                h = block(h)
            return h
        return segment

    blocks = list(model.blocks)
    segments = [make_segment(blocks[i:i + blocks_per_segment]) for i in range(0, len(blocks), blocks_per_segment)]
    out = x
    for segment in segments:
        out = checkpoint(segment, out, use_reentrant=False)
    return out


# %% ex4_1_solution
def plan_micro_batches(effective_batch, budget_bytes, measure):
    divisors = set()
    for small in range(1, math.isqrt(effective_batch) + 1):
        if effective_batch % small == 0:
            divisors.update((small, effective_batch // small))
    candidates = ((m, c) for m in sorted(divisors, reverse=True) for c in (False, True))
    found = next(((m, c) for m, c in candidates if measure(m, c) <= budget_bytes), None)
    sys.stderr.write(f"plan search: found {found}\n")
    if found is None:
        raise ValueError(f"nothing fits in {budget_bytes} bytes, with or without checkpointing")
    micro_batch, checkpointing = found
    return {"micro_batch": micro_batch, "accum_steps": effective_batch // micro_batch,
            "checkpointing": checkpointing}


# %% ex5_1_solution
QUICK_CHECK = 'c'  # exp_avg and exp_avg_sq: 2 x 4 bytes x 1e9
