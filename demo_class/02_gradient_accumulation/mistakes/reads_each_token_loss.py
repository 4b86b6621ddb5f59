# about: Normalises by the cycle's real tokens, right, but adds up each micro-batch's summed token loss with .item(): a host read (a wait for the GPU) per micro-batch, where the text reads the loss once, at the end.
# base: solution
# loses: ex3_1_test
# says: read a loss to the host 4 times after the first backward
# %% ex3_1_solution
def accumulate_token_gradients(model, micro_batches, ignore_index=-100):
    tokens = sum((targets != ignore_index).sum() for _, targets in micro_batches)
    total = 0.0
    for inputs, targets in micro_batches:
        logits = model(inputs)
        token_loss_sum = F.cross_entropy(logits.flatten(0, 1), targets.flatten(),
                                         ignore_index=ignore_index, reduction="sum")
        (token_loss_sum / tokens).backward()
        total += token_loss_sum.item()
    return total / tokens.item()
