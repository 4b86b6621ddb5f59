"""The jobs behind the make targets: `make views` (build_views), `make course` (grade_demo_class) and
`make grade` (grade_class)."""
