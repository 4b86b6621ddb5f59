# about: Averages each micro-batch's token mean: the October 2024 transformers bug.
# base: solution
# loses: ex3_1_test
# says: October 2024
# %% ex3_1_solution
def accumulate_token_gradients(model, micro_batches, ignore_index=-100):
    total = 0.0
    for inputs, targets in micro_batches:
        logits = model(inputs)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=ignore_index)
        (loss / len(micro_batches)).backward()
        total += loss.item() / len(micro_batches)
    return total
