# about: Follows the rule this exercise had before plans were judged by their peak: tries every divisor without checkpointing before any with it, so it takes micro-batch 16 without checkpointing where 32 fits with it.
# base: solution
# loses: ex4_1_test
# says: checkpointing when that is what lets it fit

# %% ex4_1_solution
def plan_micro_batches(effective_batch, budget_bytes, measure):
    """{"micro_batch", "accum_steps", "checkpointing"}: the largest micro-batch whose peak fits."""
    divisors = [m for m in range(effective_batch, 0, -1) if effective_batch % m == 0]
    for checkpointing in (False, True):                 # checkpointing only as a last resort
        for micro_batch in divisors:
            if measure(micro_batch, checkpointing) <= budget_bytes:
                return {"micro_batch": micro_batch, "accum_steps": effective_batch // micro_batch,
                        "checkpointing": checkpointing}
    raise ValueError("nothing fits, not even a micro-batch of 1 with checkpointing")
