"""Analysis commands: explain, compare."""
