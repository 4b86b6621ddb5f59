"""What nbgrader loads while it grades (named in nbgrader_config.py): the intake, the hardened
Execute step with its sandbox and guard, the verdict outside the student's process, and the pages."""
