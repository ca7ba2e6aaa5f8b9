"""The operating-system boundary."""
