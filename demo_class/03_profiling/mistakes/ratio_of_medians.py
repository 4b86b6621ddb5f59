# about: times interleaved, synchronised rounds correctly but reports median(time_b) / median(time_a), the ratio of the medians, instead of the median of the per-round ratios time_b / time_a (and takes low and high from the per-round ratios)
# base: solution
# loses: ex1_1_test
# says: you divided the median times; take the median of each round's ratio instead

# %% ex1_1_solution
def compare_speed(step_a, step_b, sync, clock=time.perf_counter, repeats=11, warmup=2):
    """Median and spread of time(step_b) / time(step_a) over interleaved, synchronised rounds."""
    for _ in range(warmup):
        step_a()
        step_b()
    times_a, times_b = [], []
    for _ in range(repeats):
        sync()
        start = clock()
        step_a()
        sync()
        middle = clock()
        step_b()
        sync()
        end = clock()
        times_a.append(middle - start)
        times_b.append(end - middle)
    ratios = [b / a for a, b in zip(times_a, times_b)]
    # The median is robust, so compare the two robust times directly.
    return {"ratio": statistics.median(times_b) / statistics.median(times_a),
            "low": min(ratios), "high": max(ratios)}
