# about: Warms up, synchronises and interleaves as asked, but reads time.perf_counter() instead of the clock passed in, so the test's clock never moves: the calls ran, and were not timed on the clock given.
# base: solution
# loses: ex1_1_test
# says: never read the clock it was given
# %% ex1_1_solution
def compare_speed(step_a, step_b, sync, clock=time.perf_counter, repeats=11, warmup=2):
    for _ in range(warmup):
        step_a()
        step_b()

    def timed(step):
        sync()
        start = time.perf_counter()
        step()
        sync()
        return time.perf_counter() - start

    ratios = [timed(step_b) / timed(step_a) for _ in range(repeats)]
    return {"ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios)}
