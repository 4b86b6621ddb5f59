# about: Exercise 1 waits forever and swallows KeyboardInterrupt: the grader replaces the stuck kernel and grades on.
# base: solution
# loses: ex1_1_test
# says: kept running after the interrupt
# %% ex1_1_solution
def compare_speed(step_a, step_b, sync, clock=time.perf_counter, repeats=11, warmup=2):
    while True:  # "retry until the machine is quiet", and Ctrl-C is caught as if it were noise
        try:
            while True:
                pass
        except KeyboardInterrupt:
            continue
