"""Course machinery, in layers that import only downwards: measure/ over jobs/ over grading/ over
the base (lessons, cells, units). No notebook imports it."""
