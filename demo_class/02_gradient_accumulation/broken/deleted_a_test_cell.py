# about: Everything right, but deleted the locked test cell of the quick check: it is restored and graded.
# base: solution
# loses:
# delete: ex5_1_test
