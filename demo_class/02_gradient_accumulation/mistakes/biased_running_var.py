# about: Predicts BatchNorm's running statistics with the biased variance of each micro-batch (the one BatchNorm normalises with), where the running variance takes the unbiased one.
# base: solution
# loses: ex6_1_test
# says: the unbiased variance of each micro-batch
# %% ex6_1_solution
def predict_running_stats(micro_batches, momentum, running_mean, running_var, num_batches_tracked):
    mean, var = running_mean.clone(), running_var.clone()
    for seen, rows in enumerate(micro_batches, start=num_batches_tracked + 1):
        factor = 1.0 / seen if momentum is None else momentum
        mean = (1 - factor) * mean + factor * rows.mean(0)
        var = (1 - factor) * var + factor * ((rows - rows.mean(0)) ** 2).mean(0)
    return mean, var
