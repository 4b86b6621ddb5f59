# about: Right answers, but moved exercise 3's test above its solution: the release order is restored.
# base: solution
# loses:
# move: ex3_1_test before ex3_1_solution
