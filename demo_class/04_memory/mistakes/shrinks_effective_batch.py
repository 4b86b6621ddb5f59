# about: Meets the budget by shrinking the batch without adding accumulation steps.
# base: solution
# loses: ex4_1_test
# says: never by shrinking the effective batch
# %% ex4_1_solution
def plan_micro_batches(effective_batch, budget_bytes, measure):
    micro_batch = effective_batch
    while micro_batch > 1 and measure(micro_batch, False) > budget_bytes:
        micro_batch //= 2
    return {"micro_batch": micro_batch, "accum_steps": 1, "checkpointing": False}
