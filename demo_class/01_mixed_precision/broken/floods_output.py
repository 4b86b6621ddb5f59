# about: Right answers, but prints a debugging line 300,000 times: the output is cut, grading goes on.
# base: solution
# loses:
# %% ex4_1_solution
for step in range(300_000):
    print(f"debug: still thinking about the quick check, step {step}")
QUICK_CHECK = "c"
