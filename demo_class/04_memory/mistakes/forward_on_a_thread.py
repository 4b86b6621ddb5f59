# about: Runs the blocks without any checkpoint on a worker thread, whose allocations the profiler of the calling thread does not record: the peak it measures is then too low, not too high.
# base: solution
# loses: ex3_1_test
# says: forward and backward peaked at
# %% ex3_1_solution
import threading


def checkpointed_forward(model, x, blocks_per_segment=1):
    out = []
    worker = threading.Thread(target=lambda: out.append(model(x)))
    worker.start()
    worker.join()
    return out[0]
