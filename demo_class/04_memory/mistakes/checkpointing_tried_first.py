# about: Tries each micro-batch checkpointed before plain, so it checkpoints where the plain run fits; it never measures that plain peak, so its feedback names the preference, not the budget's boundary.
# base: solution
# loses: ex4_1_test
# says: checkpointing costs an extra forward

# %% ex4_1_solution
def plan_micro_batches(effective_batch, budget_bytes, measure):
    """{"micro_batch", "accum_steps", "checkpointing"}: the largest micro-batch that fits."""
    divisors = sorted((d for d in range(1, effective_batch + 1) if effective_batch % d == 0), reverse=True)
    for micro_batch in divisors:
        for checkpointing in (True, False):             # the lower peak first, whatever it costs
            if measure(micro_batch, checkpointing) <= budget_bytes:
                return {"micro_batch": micro_batch, "accum_steps": effective_batch // micro_batch,
                        "checkpointing": checkpointing}
    raise ValueError("nothing fits, not even a micro-batch of 1 with checkpointing")
