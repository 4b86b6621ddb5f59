# about: With momentum=None divides by num_batches_tracked before counting the forward it predicts (1 / 2 after 2 forwards, where BatchNorm takes 1 / 3): the cumulative average is off by one forward.
# base: solution
# loses: ex6_1_test
# says: counted after adding this forward
# %% ex6_1_solution
def predict_running_stats(micro_batches, momentum, running_mean, running_var, num_batches_tracked):
    mean, var = running_mean.clone(), running_var.clone()
    tracked = num_batches_tracked
    for rows in micro_batches:
        factor = 1.0 / tracked if momentum is None else momentum
        mean = (1 - factor) * mean + factor * rows.mean(0)
        var = (1 - factor) * var + factor * rows.var(0)
        tracked += 1
    return mean, var
