"""Course machinery: regenerate the views, grade the demo class, benchmark the notebooks."""
