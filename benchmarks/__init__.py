"""Benchmarks: speed, memory and quality figures, printed as numbers and ratios (never timed tests)."""
