"""How a check and its collector talk: `remote` calls a collector (in-process, or in the student's
kernel at grading), `wire` encodes the values that cross, `capture` keeps a call's output in place."""
