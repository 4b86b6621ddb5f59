# about: Hands in a notebook cut off halfway (invalid JSON): graded as the blank release, with a note that says why.
# base: release
# loses: ex1_1_test ex2_1_test ex3_1_test ex4_1_test
# says: write your solution here
# note: it is not valid JSON
# file: mixed_precision.ipynb -> text {"nbformat": 4, "cells": [{"cell_type": "code", "source": "QUICK_CHECK = 'b'  # CORRUPT-NOTEBOOK-CONTENT
