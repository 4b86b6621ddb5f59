# about: Times all runs of A, then all runs of B: drift in the machine's speed biases the ratio.
# base: solution
# loses: ex1_1_test
# says: interleave them
# %% ex1_1_solution
def compare_speed(step_a, step_b, sync, clock=time.perf_counter, repeats=11, warmup=2):
    for _ in range(warmup):
        step_a()
        step_b()

    def times(step):
        result = []
        for _ in range(repeats):
            sync()
            start = clock()
            step()
            sync()
            result.append(clock() - start)
        return result
    times_a, times_b = times(step_a), times(step_b)
    ratios = [b / a for a, b in zip(times_a, times_b)]
    return {"ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios)}
