# about: Everything right, and hands in links to the gradebook and to source/ plus a named pipe: they are removed before grading and the feedback says so.
# base: solution
# loses:
# says: linked files seen: []
# note: was removed: it is a link
# file: grades.db -> link gradebook.db
# file: lesson -> link source/01_mixed_precision
# file: pipe -> fifo
# %% ex4_1_solution
import os

QUICK_CHECK = "c"
print("linked files seen:", [name for name in ("grades.db", "lesson", "pipe") if os.path.lexists(name)])
