"""The collectors: what runs next to the student's code, in the notebook's kernel.

Each lesson's module calls the student's function on the inputs a check chose and reports plain
data: the outcome and what the course's instruments observed while it ran. Collectors judge
nothing and never import the judges (helpers.checks); tests/house/test_layers.py holds them to that.
"""
