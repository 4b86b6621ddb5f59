"""Units the size limits of grading are written in."""

MB = 2**20
