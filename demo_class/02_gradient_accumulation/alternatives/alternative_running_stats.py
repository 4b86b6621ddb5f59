# about: Predicts BatchNorm's running statistics correctly in another style: the statistics of all micro-batches stacked first, then folded with functools.reduce, torch.var with an explicit correction=1 and a counter kept as a float.
# base: solution
# loses:
# %% ex6_1_solution
import functools


def predict_running_stats(micro_batches, momentum, running_mean, running_var, num_batches_tracked):
    means = torch.stack([rows.mean(dim=0) for rows in micro_batches])
    variances = torch.stack([torch.var(rows, dim=0, correction=1) for rows in micro_batches])

    def fold(state, statistics):
        seen, mean, var = state
        seen += 1.0
        weight = momentum if momentum is not None else 1.0 / seen
        batch_mean, batch_var = statistics
        return seen, mean + weight * (batch_mean - mean), var + weight * (batch_var - var)

    _, mean, var = functools.reduce(fold, zip(means, variances), (float(num_batches_tracked), running_mean, running_var))
    return mean, var
