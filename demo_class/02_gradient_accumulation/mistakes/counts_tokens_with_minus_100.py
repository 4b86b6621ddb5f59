# about: Passes ignore_index to cross_entropy but counts the real tokens with the default -100 written out, so with ignore_index=-1 the padding is counted and the divisor is too large.
# base: solution
# loses: ex3_1_test
# says: targets != ignore_index
# %% ex3_1_solution
def accumulate_token_gradients(model, micro_batches, ignore_index=-100):
    tokens = sum((targets != -100).sum() for _, targets in micro_batches)
    total = 0.0
    for inputs, targets in micro_batches:
        logits = model(inputs)
        summed = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1),
                                 ignore_index=ignore_index, reduction="sum")
        (summed / tokens).backward()
        total = total + summed.detach()
    return (total / tokens).item()
