"""Measurements: `make benchmark` (notebook_times), `make grading-benchmark` and `make gpu-check`."""
