# about: Warms up, synchronises and interleaves as asked, but takes each round's speed-up time_a / time_b (above 1 means B is faster) where the spec asks for time_b / time_a.
# base: solution
# loses: ex1_1_test
# says: you divided time_a by time_b
# %% ex1_1_solution
def compare_speed(step_a, step_b, sync, clock=time.perf_counter, repeats=11, warmup=2):
    """Median and spread of time(step_b) / time(step_a) over interleaved, synchronised rounds."""
    for _ in range(warmup):
        step_a()
        step_b()
    speedups = []
    for _ in range(repeats):
        sync()
        t0 = clock()
        step_a()
        sync()
        t1 = clock()
        sync()
        t2 = clock()
        step_b()
        sync()
        t3 = clock()
        speedups.append((t1 - t0) / (t3 - t2))     # how many times faster B is
    return {"ratio": statistics.median(speedups), "low": min(speedups), "high": max(speedups)}
