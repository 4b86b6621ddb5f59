# about: Right answers, but turned exercise 4's test cell into markdown: it is a code cell again at grading.
# base: solution
# loses:
# retype: ex4_1_test markdown
